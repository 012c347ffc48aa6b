"""The bad-input catalogue: every wrong site file or option is one clear line, nothing more.

Each case runs the real CLI boundary (`slurmtorch.cli.main.main`) in-process and pins:
stderr is `error: ...` (naming the file and key where there is one) plus at most a
`tip:` line, the exit code is non-zero, nothing escapes as a traceback, and no job
folder or script is left behind (SLURMTORCH_HOME is in tmp_path; sbatch is never
reached, and where the case would reach it a fake `sbatch` on PATH records the call).

Broken site files live in tests/bad-sites/, one per error path; each file's first line
is `# expect: <text the error line must contain>`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from slurmtorch.cli.main import main
from slurmtorch.limits import MAX_ENV_STRING

BAD_SITES = Path(__file__).resolve().parents[1] / "bad-sites"
SITE_CASES = sorted(p for p in BAD_SITES.glob("*.yaml")
                    if not p.name.startswith("_") and not p.name.endswith("-other.yaml"))


def expectation(path: Path) -> str:
    first = path.read_bytes().split(b"\n", 1)[0].decode()
    assert first.startswith("# expect: "), path
    return first[len("# expect: "):]


def also_expected(path: Path) -> list[str]:
    """The further problems a fixture pins (`# also: ...` lines after `# expect:`)."""
    lines = path.read_bytes().decode(errors="replace").splitlines()[1:]
    return [ln[len("# also: "):] for ln in lines if ln.startswith("# also: ")]


SINGLE_CASES = [p for p in SITE_CASES if not also_expected(p)]
SEVERAL_CASES = [p for p in SITE_CASES if also_expected(p)]


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    """Run `slurmtorch ARGV` in-process in tmp_path; returns (exit code, stdout, stderr)."""
    home = tmp_path / "home"
    monkeypatch.setenv("SLURMTORCH_HOME", str(home))
    monkeypatch.delenv("SLURMTORCH_SITE", raising=False)
    monkeypatch.delenv("SLURMTORCH_SITE_PATH", raising=False)
    monkeypatch.chdir(tmp_path)
    # A fake sbatch that records being called: no bad input may get that far.
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "sbatch").write_text(f"#!/bin/sh\necho called >> {tmp_path}/sbatch-called\necho 1\n")
    (fake_bin / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}{os.pathsep}{os.environ.get('PATH', '')}")
    (tmp_path / "train.py").write_text("print('hi')\n")

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        with pytest.raises(SystemExit) as exc:
            main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return exc.value.code, out, err

    run.tmp_path = tmp_path
    return run


def assert_one_clear_line(cli, code: int, out: str, err: str, message: str) -> None:
    assert code not in (0, None), (code, err)
    assert "Traceback" not in err and "Traceback" not in out
    lines = err.rstrip("\n").split("\n")
    assert lines[0].startswith("error: "), err
    assert message in err, f"expected {message!r} in:\n{err}"
    assert len(lines) <= 2 and all(ln.startswith("tip: ") for ln in lines[1:]), err
    tmp = cli.tmp_path
    jobs = tmp / "home" / "jobs"
    assert not jobs.exists() or list(jobs.iterdir()) == [], list(jobs.iterdir())
    assert not (tmp / "sbatch-called").exists()
    assert sorted(p.name for p in tmp.iterdir() if p.name not in ("home",)) == ["bin", "train.py"]


@pytest.mark.parametrize("site", SITE_CASES, ids=lambda p: p.stem)
def test_broken_site_file_is_one_line_naming_file_and_key(cli, site):
    code, out, err = cli("sbatch", "--site", site, "train.py")
    assert_one_clear_line(cli, code, out, err, expectation(site))
    more = len(also_expected(site))
    assert (f"(and {more} more: slurmtorch site validate {site})" in err) is bool(more), err


@pytest.mark.parametrize("site", [p for p in SINGLE_CASES if "template" not in p.stem], ids=lambda p: p.stem)
def test_site_validate_reports_the_same_line(cli, site):
    code, out, err = cli("site", "validate", site)
    assert_one_clear_line(cli, code, out, err, expectation(site))


@pytest.mark.parametrize("site", SEVERAL_CASES, ids=lambda p: p.stem)
def test_site_validate_reports_every_mistake_in_one_run(cli, site):
    """Each problem on its own `error:` line (its tip, if any, on the next), in file order."""
    code, out, err = cli("site", "validate", site)
    assert code == 2 and "Traceback" not in err and out == ""
    errors = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    wanted = [expectation(site), *also_expected(site)]
    assert len(errors) == len(wanted), err
    for line, text in zip(errors, wanted):
        assert text in line, (text, line)
    assert all(ln.startswith(("error: ", "tip: ")) for ln in err.splitlines()[:-1]), err
    assert err.splitlines()[-1] == f"{len(wanted)} problems in {site}"


OPTION_CASES = [
    # (id, argv after `sbatch --site testbed` unless it starts with a verb, expected text)
    ("nodes-zero", ["-N", "0", "train.py"], "--nodes must be at least 1, got 0"),
    ("nodes-negative", ["-N", "-2", "train.py"], "--nodes must be at least 1, got -2"),
    ("ntasks-per-node-zero", ["--ntasks-per-node", "0", "train.py"], "--ntasks-per-node must be at least 1"),
    ("too-many-cpus", ["--cpus-per-task", "3", "train.py"], "1 tasks x 3 CPUs per node exceeds the 2 CPUs"),
    ("too-many-tasks", ["--ntasks-per-node", "8", "train.py"], "8 tasks x 1 CPUs per node exceeds"),
    ("gpus-negative", ["--gpus-per-node", "-1", "train.py"], "--gpus-per-node must not be negative"),
    ("time-garbage", ["-t", "soon", "train.py"], "invalid --time 'soon'"),
    ("time-zero", ["-t", "0", "train.py"], "--time '0' is zero"),
    ("time-too-long-days", ["-t", "30-00", "train.py"], "time limit 30-00 exceeds the maximum 1-00:00:00"),
    ("timeout-zero", ["--timeout", "0", "train.py"], "--timeout must be at least 1"),
    ("timeout-not-int", ["--timeout", "1.5", "train.py"], "Invalid value for '--timeout'"),
    ("backend-unknown", ["--backend", "ncll", "train.py"], "unknown backend 'ncll'"),
    ("launcher-unknown", ["--launcher", "slurm", "train.py"], "unknown launcher 'slurm'"),
    ("placement-unknown", ["--placement", "numa", "train.py"], "--placement 'numa' is not one of auto, share, none"),
    ("module-invalid", ["-m", "pkg/train.py"], "invalid module name 'pkg/train.py'"),
    ("module-and-nothing", ["-m", ""], "invalid module name ''"),
    ("script-is-a-directory", ["home-dir"], "SCRIPT home-dir is a directory, not a file"),
    ("script-is-dev-null", ["/dev/null"], "SCRIPT /dev/null is not a regular file"),
    ("script-path-newline", ["a\nb.py"], "SCRIPT 'a\\nb.py' contains a newline"),
    ("site-is-a-directory", ["--site", "./home-dir", "train.py"], "site file ./home-dir is a directory, not a file"),
    ("site-is-dev-null", ["--site", "/dev/null", "train.py"], "site file /dev/null is not a regular file"),
    ("time-minutes-61", ["-t", "1:61:00", "train.py"], "invalid --time '1:61:00': minutes must be below 60"),
    ("time-seconds-99", ["-t", "0:99:99", "train.py"], "invalid --time '0:99:99': minutes must be below 60"),
    ("time-hours-25-minutes-61", ["-t", "25:61:00", "train.py"], "invalid --time '25:61:00': minutes must be below 60"),
    ("time-seconds-60", ["-t", "10:60", "train.py"], "invalid --time '10:60': seconds must be below 60"),
    ("timeout-over-the-bootstrap-limit", ["--timeout", "1000000001", "train.py"],
     "--timeout 1000000001 must be at most 1000000000 seconds"),
    ("signal-term-is-scancel", ["--signal", "TERM@60", "train.py"],
     "--signal 'TERM@60': scancel sends TERM too, so cancelling the job would requeue it"),
    ("signal-after-the-time-limit", ["--signal", "USR1@60", "-t", "1", "train.py"],
     "--signal 'USR1@60' would come 60 s before the end of a 60 s job"),
    ("env-path", ["--env", "PATH=/opt/bin", "train.py"], "--env PATH: "),
    ("env-bash-env", ["--env", "BASH_ENV=/tmp/hook.sh", "train.py"],
     "--env BASH_ENV: every non-interactive bash the job starts (the launch steps, mpirun.sh, your script's "
     "subshells) would first run the file it names"),
    ("env-bash-env-mpirun", ["mpirun", "-n", "2", "--env", "BASH_ENV=/tmp/hook.sh", "train.py"], "--env BASH_ENV: "),
    ("env-pythonhome", ["--env", "PYTHONHOME=/x", "train.py"], "--env PYTHONHOME: "),
    ("env-slurm-variable", ["--env", "SLURM_JOB_ID=5", "train.py"], "--env SLURM_JOB_ID: "),
    ("env-slurm-layout", ["--env", "SLURM_NTASKS=1", "-N", "2", "train.py"],
     "--env SLURM_NTASKS: srun reads SLURM_NTASKS for the step's layout"),
    ("env-empty-name", ["--env", "=1", "train.py"], "invalid environment variable name ''"),
    ("env-name-with-space", ["--env", "A B=1", "train.py"], "invalid environment variable name 'A B'"),
    ("env-name-dollar", ["--env", "$(id)=1", "train.py"], "invalid environment variable name '$(id)'"),
    ("env-script-owned-export-env", ["--env", "SLURM_EXPORT_ENV=NONE", "train.py"],
     "--env SLURM_EXPORT_ENV: the batch script sets SLURM_EXPORT_ENV itself"),
    ("env-script-owned-master-port", ["--env", "MASTER_PORT=1", "train.py"], "the batch script sets MASTER_PORT itself"),
    ("arg-not-utf8", ["train.py", "--", "ok", "caf\udce9"], "script argument 2 'caf\\udce9' is not UTF-8 text"),
    ("env-value-not-utf8", ["--env", "A=\udcff", "train.py"], "--env A value '\\udcff' is not UTF-8 text"),
    ("job-name-not-utf8", ["-J", "\udcff", "train.py"], "#SBATCH --job-name value '\\udcff' is not UTF-8"),
    ("account-newline", ["-A", "acct\nx", "train.py"], "#SBATCH --account value 'acct\\nx' contains a newline"),
    ("qos-carriage-return", ["--qos", "q\rx", "train.py"], "contains a newline"),
    ("job-name-carriage-return", ["-J", "a\rb", "train.py"], "contains a newline"),
    ("job-name-too-long", ["-J", "x" * 1025, "train.py"], "job name is 1025 characters; Slurm allows at most 1024"),
    ("partition-newline", ["-p", "debug\n", "train.py"], "unknown partition 'debug\\n'"),
    ("signal-kill", ["--signal", "KILL@60", "train.py"], "--signal 'KILL@60': KILL cannot be used for preemption"),
    ("signal-batch-only", ["--signal", "B:USR1@60", "train.py"], "only the R: flag is supported"),
    ("signal-garbage", ["--signal", "USR1@soon", "train.py"], "invalid --signal 'USR1@soon'"),
    ("signal-too-early", ["--signal", "USR1@70000", "train.py"], "at most 65535 seconds"),
    ("preset-unknown-signal-site", ["--preset", "preemptible", "--signal", "usr3", "train.py"], "USR3 cannot be used"),
    ("site-path-missing", ["--site", "./nowhere.yaml", "train.py"], "site file ./nowhere.yaml does not exist"),
    ("site-name-injection", ["--site", "x;rm -rf ~", "train.py"], "invalid site name 'x;rm -rf ~'"),
    ("unknown-option", ["--nodez", "2", "train.py"], "No such option"),
    # Everything after SCRIPT is the script's: the old form with slurmtorch options before a later '--'.
    ("option-after-script-before-double-dash", ["train.py", "--nodes", "2", "--", "--lr", "1"],
     "slurmtorch option --nodes after SCRIPT, before a '--'"),
    ("mpirun-option-after-script", ["mpirun", "train.py", "-n", "2", "--", "x"], "slurmtorch option -n after SCRIPT"),
    # -n/--ntasks: uneven layouts, where they can be.
    ("ntasks-fewer-than-nodes", ["-N", "2", "-n", "1", "train.py"], "-n 1 ranks cannot cover 2 nodes"),
    ("ntasks-do-not-fit", ["-N", "2", "-n", "5", "--ntasks-per-node", "2", "train.py"],
     "-n 5 ranks do not fit on 2 nodes of at most 2"),
    ("ntasks-zero", ["-n", "0", "train.py"], "-n/--ntasks must be at least 1"),
    ("ntasks-beyond-the-partition", ["-n", "5", "train.py"], "5 nodes requested, but partition 'debug' allows at most 4"),
    ("ntasks-uneven-torchrun", ["-N", "2", "-n", "3", "--launcher", "torchrun", "train.py"],
     "torchrun starts the same number of ranks on every node"),
    ("ntasks-with-roles", ["-n", "2", "--role", "master=1", "--role", "worker=1", "train.py"],
     "-n/--ntasks cannot apply"),
    # sbatch's options, checked against the site and sbatch's syntax.
    ("mem-beyond-the-node", ["--mem", "5G", "train.py"], "--mem 5G is more than the 4G of memory of node type 'cpu'"),
    ("mem-per-cpu-beyond-the-node", ["-c", "2", "--mem-per-cpu", "3G", "train.py"], "--mem-per-cpu 3G x 2 CPUs"),
    ("mem-garbage", ["--mem", "1GB", "train.py"], "invalid --mem '1GB'"),
    ("mem-two-kinds", ["--mem", "1G", "--mem-per-cpu", "100", "train.py"], "--mem and --mem-per-cpu together"),
    ("mem-per-gpu-without-gpus", ["--mem-per-gpu", "1G", "train.py"], "--mem-per-gpu, but the job asks for no GPUs"),
    ("dependency-garbage", ["-d", "afterok 12", "train.py"], "invalid --dependency 'afterok 12'"),
    ("dependency-mixed-separators", ["-d", "afterok:1,afterany:2?singleton", "train.py"],
     "',' (all) and '?' (any) cannot be mixed"),
    ("begin-garbage", ["--begin", "soon", "train.py"], "invalid --begin 'soon'"),
    ("begin-out-of-range", ["--begin", "2026-02-30T25:00", "train.py"], "hour 25 is out of range"),
    ("mail-type-unknown", ["--mail-type", "END,NEVER", "train.py"], "unknown event 'NEVER'"),
    ("nodelist-beyond-nodes", ["-N", "2", "-w", "node[1-3]", "train.py"], "--nodelist names 3 nodes, but the job has 2"),
    ("nodelist-garbage", ["-w", "node[1-", "train.py"], "invalid --nodelist 'node[1-'"),
    ("nodelist-file", ["-w", "./hosts", "train.py"], "--nodelist './hosts' looks like a file name"),
    ("nodelist-and-exclude-overlap", ["-w", "node1", "-x", "node[1-2]", "train.py"],
     "node1 both in --nodelist and in --exclude"),
    ("gres-gpu", ["--gres", "gpu:2", "train.py"], "--gres gpu:2: GPUs are asked for with --gpus-per-node"),
    ("gres-garbage", ["--gres", "nvme:1:2:3", "train.py"], "invalid --gres 'nvme:1:2:3'"),
    ("constraint-empty", ["-C", "", "train.py"], "--constraint is empty"),
    ("constraint-newline", ["-C", "a\nb", "train.py"], "#SBATCH --constraint value 'a\\nb' contains a newline"),
    ("mail-user-newline", ["--mail-user", "a\rb", "train.py"], "contains a newline"),
    # The escape hatch: what slurmtorch sets itself, and what would break the script.
    ("sbatch-arg-output", ["--sbatch-arg=--output=/tmp/x", "train.py"], "slurmtorch sets it: the job folder holds"),
    ("sbatch-arg-layout", ["--sbatch-arg=--ntasks-per-node=2", "train.py"], "the ranks derive their world from it"),
    ("sbatch-arg-abbreviation", ["--sbatch-arg=--part=x", "train.py"], "read as --partition"),
    ("sbatch-arg-has-an-option", ["--sbatch-arg=--constraint=x", "train.py"], "slurmtorch has an option for it"),
    ("sbatch-arg-array", ["--sbatch-arg=--array=0-3", "train.py"], "--sbatch-arg=--array=0-3: slurmtorch sets it"),
    ("sbatch-arg-wrap", ["--sbatch-arg=--wrap=hostname", "train.py"], "the job is slurmtorch's script"),
    ("sbatch-arg-wait", ["--sbatch-arg=--wait", "train.py"], "sbatch would block instead of printing the job id"),
    ("sbatch-arg-test-only", ["--sbatch-arg=--test-only", "train.py"], "sbatch would submit nothing"),
    ("sbatch-arg-short", ["--sbatch-arg=-p", "train.py"], "expected --OPTION or --OPTION=VALUE"),
    ("sbatch-arg-space", ["--sbatch-arg", "--licenses fs:1", "train.py"], "expected --OPTION or --OPTION=VALUE"),
    ("sbatch-arg-newline", ["--sbatch-arg=--licenses=a\nb", "train.py"], "contains a newline"),
    ("sbatch-arg-twice", ["--sbatch-arg=--nice=1", "--sbatch-arg=--nice=2", "train.py"], "--nice given twice"),
    ("sbatch-arg-hold", ["--sbatch-arg=--hold", "train.py"], "slurmtorch submits the job held and releases it"),
    ("srun-arg-layout", ["--srun-arg=--ntasks=2", "train.py"], "the ranks derive their world from it"),
    ("srun-arg-mpi", ["--srun-arg=--mpi=pmi2", "train.py"], "from the site's srun_mpi"),
    ("srun-arg-kill-on-bad-exit", ["--srun-arg=--kill-on-bad-exit=0", "train.py"], "a failed rank ends the step"),
    ("srun-arg-export", ["--srun-arg=--export=NONE", "train.py"], "without PATH or the script's exports"),
    ("srun-arg-under-mpirun", ["--launcher", "mpirun", "--srun-arg=--label", "train.py"],
     "launcher mpirun starts its ranks without srun"),
    ("mpirun-zero-ranks", ["mpirun", "-n", "0", "train.py"], "-n must be at least 1, got 0"),
    ("mpirun-missing-hostfile", ["mpirun", "-n", "2", "--hostfile", "hosts.txt", "train.py"], "hostfile hosts.txt does not exist"),
    ("logs-unknown-job", ["logs", "4242"], "no job folder"),
    ("logs-bad-job-id", ["logs", "../../etc"], "invalid job id '../../etc'"),
    ("cancel-bad-job-id", ["cancel", "1 2"], "invalid job id '1 2'"),
    ("site-show-bad-name", ["site", "show", "../etc/passwd"], "site file ../etc/passwd does not exist"),
    ("site-validate-missing", ["site", "validate", "nope.yaml"], "site file nope.yaml does not exist"),
    ("clean-age-5000-digits", ["clean", "--older-than", "9" * 5000], "(5000 characters) is more than 36500 days"),
    ("clean-age-400-digits-hours", ["clean", "--older-than", "9" * 400 + "h"], "is more than 36500 days"),
    ("clean-age-centuries", ["clean", "--older-than", "36501d"], "--older-than '36501d' is more than 36500 days"),
]


@pytest.mark.parametrize("argv, message", [c[1:] for c in OPTION_CASES], ids=[c[0] for c in OPTION_CASES])
def test_bad_option_is_one_clear_line(cli, argv, message):
    verbs = ("mpirun", "logs", "cancel", "site", "status", "clean")
    full = argv if argv[0] in verbs else ["sbatch", "--site", "testbed", *argv]
    made = any("home-dir" in a for a in argv)
    if made:
        (cli.tmp_path / "home-dir").mkdir()
    code, out, err = cli(*full)
    if made:
        (cli.tmp_path / "home-dir").rmdir()
    assert_one_clear_line(cli, code, out, err, message)


def test_world_writable_job_root_is_refused_before_anything_is_submitted(cli):
    jobs = cli.tmp_path / "home" / "jobs"
    jobs.mkdir(parents=True)
    jobs.chmod(0o777)
    code, out, err = cli("sbatch", "--site", "testbed", "train.py")
    assert code != 0 and err.startswith(f"error: {jobs} (in SLURMTORCH_HOME {jobs.parent}) is writable by anyone "
                                        "(mode 0777)")
    assert "Traceback" not in err and list(jobs.iterdir()) == []
    assert not (cli.tmp_path / "sbatch-called").exists()


def test_a_backslash_in_slurmtorch_home_is_refused_before_anything_is_written(cli, monkeypatch):
    monkeypatch.setenv("SLURMTORCH_HOME", str(cli.tmp_path / "home" / "a\\b"))
    code, out, err = cli("sbatch", "--site", "testbed", "train.py")
    assert_one_clear_line(cli, code, out, err, "contains a backslash, which turns off Slurm's %j/%t patterns")
    assert not (cli.tmp_path / "home").exists()


def test_the_catalogue_has_at_least_forty_cases():
    assert len(SITE_CASES) + len(OPTION_CASES) >= 40


def test_bad_site_fixtures_are_not_world_writable_or_executable():
    for p in SITE_CASES:
        assert not p.stat().st_mode & (stat.S_IWOTH | stat.S_IXUSR), p


def test_deeply_nested_yaml_is_one_line_not_a_crash(cli):
    """30000 nested lists used to crash the YAML parser (exit 139, no message); 5000 gave
    `unexpected RecursionError`. Site files are small and flat: nesting is capped."""
    deep = cli.tmp_path / "home-deep.yaml"
    deep.write_text("description: " + "[" * 30000 + "]" * 30000 + "\n")
    for argv in (["site", "validate", deep], ["sbatch", "--site", deep, "train.py"]):
        code, out, err = cli(*argv)
        deep_copy = deep.read_text()
        deep.unlink()
        assert_one_clear_line(cli, code, out, err, "nested more than 64 levels deep")
        deep.write_text(deep_copy)
    deep.unlink()


def test_a_broken_site_on_the_search_path_does_not_hide_the_others(cli, monkeypatch):
    folder = cli.tmp_path / "home-sites"
    folder.mkdir()
    (folder / "deep.yaml").write_text("description: " + "[" * 30000 + "]" * 30000 + "\n")
    monkeypatch.setenv("SLURMTORCH_SITE_PATH", str(folder))
    code, out, err = cli("site", "list")
    assert code == 0 and "testbed" in out, (code, out, err)
    assert "deep.yaml" in out and "nested more than 64 levels deep" in out and "Traceback" not in out + err
    for p in folder.iterdir():
        p.unlink()
    folder.rmdir()


def test_an_environment_too_large_for_sbatch_is_refused_by_validate(cli):
    """10 MB of env passed `site validate` and then broke sbatch (its script limit is 4 MB); one
    byte past what execve takes is refused the same way (10 MB cost 23 s of YAML parsing)."""
    import yaml

    data = yaml.safe_load((Path(__file__).resolve().parents[2] / "site-configs" / "testbed.yaml").read_text())
    data["node_types"]["cpu"]["env"]["HUGE"] = "x" * MAX_ENV_STRING
    site = cli.tmp_path / "home-big.yaml"
    site.write_text(yaml.safe_dump(data))
    code, out, err = cli("site", "validate", site)
    site.unlink()
    assert_one_clear_line(cli, code, out, err, "HUGE")


# What the centres' presets refuse before sbatch (issue 25), each with the fix.
CENTRE_CASES = [
    ("vista-no-time", ["--site", "tacc-vista", "train.py"], "partition 'gh' of site 'tacc-vista' requires a time limit"),
    ("vista-mem", ["--site", "tacc-vista", "-t", "30", "--mem", "10G", "train.py"],
     "--mem is refused on partition 'gh': TACC Vista does not accept --mem"),
    ("vista-gres-hatch", ["--site", "tacc-vista", "-t", "30", "--sbatch-arg=--gres=gpu:1", "train.py"],
     "--sbatch-arg=--gres is refused on partition 'gh'"),
    ("idris-account-form", ["--site", "idris-jean-zay", "-p", "gpu_p6", "-A", "abc@v100", "train.py"],
     "partition 'gpu_p6' takes accounts of the form NAME@h100, not 'abc@v100'"),
    ("jsc-gres-count", ["--site", "jsc-juwels-booster", "-A", "p", "--gres", "gpu:2", "train.py"],
     "the job has 4 GPUs per node"),
    ("singularity-image-code", ["--site", "idris-jean-zay-singularity", "--container-image", "$(id).sif", "train.py"],
     "a '$' that is not $NAME"),
]


@pytest.mark.parametrize("argv, message", [c[1:] for c in CENTRE_CASES], ids=[c[0] for c in CENTRE_CASES])
def test_a_centres_refusal_is_one_clear_line_before_sbatch(cli, argv, message):
    code, out, err = cli("sbatch", *argv)
    assert_one_clear_line(cli, code, out, err, message)
    assert not (cli.tmp_path / "sbatch-called").exists()
