"""Shell safety through real submissions: what goes in comes out, byte for byte.

A corpus of adversarial strings travels as script arguments, `--env` values, the job
name and the paths of the script and the job folder, through the rendered script,
real `sbatch` (its own #SBATCH parser), `srun`, and the bootstrap into each rank,
which dumps `sys.argv`, `os.environ` and SLURM_JOB_NAME as JSON. Job names are also
checked for every corpus entry against what sbatch stored, with held submissions that
never run. A value no directive can carry (a newline) is refused, not passed on.
"""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

import pytest

CORPUS = [
    "plain",
    "two words",
    "  leading and trailing  ",
    "it's",
    'say "hi"',
    "both ' and \" quotes",
    "$(touch /tmp/slurmtorch-pwned)",
    "`touch /tmp/slurmtorch-pwned`",
    "${HOME} and $HOME",
    "$'ansi-c'",
    "a; touch /tmp/slurmtorch-pwned",
    "a && b || c",
    "a | b > /tmp/slurmtorch-pwned",
    "line1\nline2",
    "tab\there",
    "cr\rlf\r\n",
    "*",
    "?.py [a-z]* {a,b}",
    "~",
    "~root/x",
    "-n",
    "--help",
    "-",
    "--",
    "%j %t %N %% %x",
    "%A_%a",
    "h\u00e9llo w\u00f6rld",
    "\u65e5\u672c\u8a9e",
    "rocket \U0001F680",
    "back\\slash \\n \\",
    "!history !! ^x^y",
    "#not a comment",
    "a=b=c",
    "\x1b[31mred\x1b[0m",
    "",
    "x" * 4000,
]
NEWLINE_FREE = [s for s in CORPUS if not any(c in s for c in "\n\r")]

PROBE = """\
import json, os, sys
names = sorted(k for k in os.environ if k.startswith("ST_"))
print(json.dumps({"rank": os.environ.get("RANK"), "argv": sys.argv[1:],
                  "env": {k: os.environ[k] for k in names},
                  "job_name": os.environ.get("SLURM_JOB_NAME")}), flush=True)
"""

pytestmark = pytest.mark.testbed


def slurmtorch(testbed, home: Path, *argv, **kw) -> subprocess.CompletedProcess:
    env = {"SLURMTORCH_HOME": str(home)}
    return testbed.run([testbed.python, "-m", "slurmtorch.cli.main", *map(str, argv)], env=env, **kw)


def test_corpus_is_big_enough_and_covers_the_classics():
    assert len(CORPUS) >= 30
    joined = "".join(CORPUS)
    for needle in ("'", '"', "$(", "`", ";", "&&", "\n", "\t", "*", "~", "%j", "%t", "\u00e9"):
        assert needle in joined
    assert any(s.startswith("-") for s in CORPUS) and max(map(len, CORPUS)) >= 4000


def test_every_rank_sees_args_env_and_job_name_byte_for_byte(testbed, tmp_path):
    # Paths with spaces, quotes, $ and % for both the script and the job folder root.
    where = tmp_path / "dir with 'quote' $(x) and %j"
    where.mkdir()
    script = where / "probe script.py"
    script.write_text(PROBE)
    home = tmp_path / "home with space % $HOME"
    job_name = "name with 'q' \"dq\" $(x) `y` ; && %j ~ *"
    env_args = [a for i, value in enumerate(CORPUS) for a in ("--env", f"ST_{i}={value}")]
    proc = slurmtorch(testbed, home, "sbatch", "--site", "testbed", "-N", "2", "-J", job_name, *env_args,
                      "--wait", script, "--", *CORPUS, timeout=180, cwd=tmp_path)  # it holds -n and --
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not Path("/tmp/slurmtorch-pwned").exists()
    job_id = proc.stdout.splitlines()[0]
    folder = home / "jobs" / job_id
    expected_env = {f"ST_{i}": v for i, v in enumerate(CORPUS)}
    for rank in range(2):
        record = json.loads((folder / f"rank-{rank}.out").read_text(encoding="utf-8"))
        assert record["rank"] == str(rank)
        assert record["argv"] == CORPUS
        assert record["env"] == expected_env
        assert record["job_name"] == job_name

    # Nothing in the job folder (or the folder itself) is world-writable.
    for p in [folder, *folder.iterdir()]:
        assert not p.stat().st_mode & stat.S_IWOTH, (p, oct(p.stat().st_mode))
    assert not (home / "jobs").stat().st_mode & stat.S_IWOTH


@pytest.mark.slurm_versions
def test_sbatch_stores_every_job_name_exactly(testbed, tmp_path):
    """Each name through the rendered #SBATCH --job-name line into real sbatch, held, never run."""
    script = tmp_path / "noop.py"
    script.write_text("pass\n")
    home = tmp_path / "home"
    ids = []
    try:
        for name in NEWLINE_FREE:
            if not name or len(name) > 1024:
                continue  # empty: "the script's name"; too long: refused (test_bad_input)
            dry = slurmtorch(testbed, home, "sbatch", "--site", "testbed", "-J", name, "--dry-run", script)
            assert dry.returncode == 0, (name, dry.stderr)
            sub = testbed.run(["sbatch", "--parsable", "--hold"], input=dry.stdout, check=False)
            assert sub.returncode == 0, (name, sub.stderr)
            ids.append(sub.stdout.strip().split(";")[0])
            shown = testbed.run(["squeue", "-h", "-j", ids[-1], "-o", "%j"]).stdout
            assert shown == name + "\n", (name, shown)
    finally:
        if ids:
            testbed.run(["scancel", *ids])
    assert not home.exists()  # --dry-run writes nothing


@pytest.mark.parametrize("bad", [s for s in CORPUS if any(c in s for c in "\n\r")])
def test_a_newline_in_a_job_name_is_refused_not_passed_on(testbed, tmp_path, bad):
    script = tmp_path / "noop.py"
    script.write_text("pass\n")
    proc = slurmtorch(testbed, tmp_path / "home", "sbatch", "--site", "testbed", "-J", bad, script)
    assert proc.returncode != 0 and proc.stdout == ""
    assert proc.stderr.startswith("error: #SBATCH --job-name value ") and "contains a newline" in proc.stderr
    assert not (tmp_path / "home" / "jobs").exists() or not list((tmp_path / "home" / "jobs").iterdir())


def test_generated_script_and_folder_modes_under_a_permissive_umask(testbed, tmp_path):
    """Even with umask 000 the job folder and script.sh are not world-writable."""
    script = tmp_path / "noop.py"
    script.write_text("pass\n")
    home = tmp_path / "home"
    code = ("import os, sys; os.umask(0); from slurmtorch.cli.main import main; "
            "main(sys.argv[1:])")
    proc = testbed.run([testbed.python, "-c", code, "sbatch", "--site", "testbed", str(script)],
                       env={"SLURMTORCH_HOME": str(home)})
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.split()[0]
    try:
        folder = home / "jobs" / job_id
        for p in (home / "jobs", folder, folder / "script.sh"):
            mode = p.stat().st_mode
            assert not mode & stat.S_IWOTH, (p, oct(mode))
        # The job's folder is private whatever the umask (script.sh holds the --env exports).
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert stat.S_IMODE((folder / "script.sh").stat().st_mode) == 0o600
    finally:
        testbed.run(["scancel", job_id])
