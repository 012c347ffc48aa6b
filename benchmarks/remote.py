"""Working from a laptop (issue 27): `--cluster NAME` beside the same work by hand over ssh.

`slurmtorch ... --cluster NAME` and its by-hand equivalent, measured in the same run.

    .venv/bin/python benchmarks/remote.py --host ALIAS --cluster NAME [--reps N] [--partition P]

Run it as the laptop: ALIAS is the login host's ~/.ssh/config alias, NAME the cluster of the
clusters file that reaches it (host: ALIAS). Each pair alternates (A B, B A, ...); medians.
Benchmarks, not tests: nothing here asserts a time. It leaves no job in the queue.

1. Submitting a trivial job, first connection (no master socket: ours is closed with
   `ssh -O exit` on our ControlPath before each; by hand is plain `ssh HOST sbatch ...`, a
   connection of its own) and multiplexed (ours with its master up; by hand `ssh -o
   ControlMaster=auto -o ControlPath=... -o ControlPersist=60 HOST sbatch ...`, as an expert
   types it). Ours also syncs the script's one-file folder and takes the snapshot; by hand
   sends no code (`sbatch --wrap true`). Every job is cancelled once its time is taken.
2. Sending a 1,000-file git repository: `slurmtorch sbatch --cluster NAME --dry-run` (it syncs
   the tree, then renders on the cluster) beside `git ls-files | rsync -a --files-from=-` over
   a multiplexed ssh; first into an empty folder, then after editing one file.
3. `slurmtorch status --cluster NAME` beside `ssh HOST squeue --me` (both multiplexed).
4. Where our time goes: the pieces of a forwarded command, each timed alone.
5. nemo-run (a venv of its own, `.venv-nemorun`, if there; NEMO_INSTALL makes it): its
   SlurmExecutor over its SSHTunnel submitting the same trivial job, a fresh process each time as a user's script is.
   Where it cannot, the reason is printed in one line and the row left out.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from _common import REPO, alternate, med, ms, slurmtorch_cli, table
from snapshot import LISTING, make_tree

from slurmtorch.remote import clusters, request, ssh, sync
from slurmtorch.submit.jobfolder import snapshot as snapshots

NEMO_PY = REPO / ".venv-nemorun" / "bin" / "python"
# nemo-run 0.11.1 imports leptonai.api.v1, which leptonai 0.47 (what pip picks) no longer has.
NEMO_INSTALL = "python3.11 -m venv .venv-nemorun && .venv-nemorun/bin/pip install nemo-run 'leptonai==0.27.3'"
_SENT = re.compile(r"\((\d+) files, (\d+) sent\)")
_RSYNC_SENT = re.compile(r"Number of regular files transferred: ([0-9,]+)")

# A trivial job through nemo-run: argv host port user identity job_dir partition; prints the job id.
NEMO_SUBMIT = """\
import sys, time
t0 = time.perf_counter()
import nemo_run as run
host, port, user, identity, job_dir, partition = sys.argv[1:7]
tunnel = run.SSHTunnel(host=host, port=int(port), user=user, identity=identity, job_dir=job_dir)
executor = run.SlurmExecutor(account="bench", partition=partition or None, nodes=1, ntasks_per_node=1,
                             time="00:01:00", tunnel=tunnel, packager=run.Packager())
t1 = time.perf_counter()
with run.Experiment("bench", executor=executor, log_level="WARN") as exp:
    exp.add(run.Script(inline="true"), name="trivial")
    exp.run(detach=True)
    job = exp.jobs[0]
    handle = job.handle
t2 = time.perf_counter()
print("JOB", handle, "IMPORT", t1 - t0, "SUBMIT", t2 - t1, flush=True)
"""


class Bench:
    """The laptop's two ways to the cluster: ours (slurmtorch) and by hand (ssh, rsync)."""

    def __init__(self, host: str, cluster: str, partition: str | None, scratch: Path):
        self.host, self.name, self.partition, self.scratch = host, cluster, partition, scratch
        self.cluster = clusters.find(cluster)
        self.our_socket = str(ssh.socket_folder() / "%C")
        # By hand: a ControlPath of the benchmark's own, so closing ours leaves it up and the reverse.
        self.mux = ["-o", "ControlMaster=auto", "-o", f"ControlPath={scratch}/hand-%C", "-o", "ControlPersist=60"]
        # The workdir as the cluster spells it (absolute), so every path below is plain.
        word = request.path_word(self.cluster.workdir or "~/.slurmtorch")
        self.workdir = self.hand(f"mkdir -p {word} && cd {word} && pwd -P").stdout.strip()
        if not re.fullmatch(r"[A-Za-z0-9_./+-]+", self.workdir):
            raise SystemExit(f"remote: the workdir {self.workdir!r} needs quoting this benchmark does not do")
        self.jobs: list[str] = []

    # ssh by hand -------------------------------------------------------------------------
    def hand(self, command: str, *, mux: bool = True, check: bool = True) -> subprocess.CompletedProcess:
        opts = self.mux if mux else ["-o", "ControlPath=none"]
        p = subprocess.run(["ssh", *opts, self.host, command], capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, timeout=300)
        if check and p.returncode != 0:
            raise RuntimeError(f"ssh {self.host} {command!r} exited {p.returncode}: {p.stderr.strip()}")
        return p

    def ours(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        argv = [str(a) for a in [*slurmtorch_cli(), *args]]
        p = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, stdin=subprocess.DEVNULL, timeout=300)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {p.returncode}:\n{p.stdout[-1500:]}\n{p.stderr[-1500:]}")
        return p

    def close_ours(self) -> None:
        subprocess.run(["ssh", "-o", f"ControlPath={self.our_socket}", "-O", "exit", self.host],
                       capture_output=True, stdin=subprocess.DEVNULL)

    def master_up(self) -> None:
        """Both masters up (untimed): ours as slurmtorch opens it, the hand one by a first command."""
        ssh.connect(self.cluster)
        self.hand("true")

    def cancel(self, job: str) -> None:
        self.jobs.append(job)
        self.hand(f"scancel {shlex.quote(job)}", check=False)

    def sbatch_words(self) -> str:
        part = f"--partition={shlex.quote(self.partition)} " if self.partition else ""
        return f"sbatch --parsable {part}--nodes=1 --time=1 --output=/dev/null --wrap true"

    # 1. submit ---------------------------------------------------------------------------
    def submit_ours(self, job_dir: Path, first: bool) -> float:
        if first:
            self.close_ours()
        else:
            self.master_up()
        extra = ["--partition", self.partition] if self.partition else []
        t0 = time.perf_counter()
        p = self.ours("sbatch", "--cluster", self.name, "--parsable", "--nodes", "1", "--time", "1", *extra,
                      "job.py", cwd=job_dir)
        dt = time.perf_counter() - t0
        self.cancel(p.stdout.strip().split(";")[0])
        return dt

    def submit_hand(self, first: bool) -> float:
        if not first:
            self.master_up()
        t0 = time.perf_counter()
        p = self.hand(self.sbatch_words(), mux=not first)
        dt = time.perf_counter() - t0
        self.cancel(p.stdout.strip().split(";")[0])
        return dt

    # 2. sync -----------------------------------------------------------------------------
    def sync_ours(self, tree: Path, fresh: bool, seen: list) -> float:
        self.master_up()
        if fresh:
            self.hand(f"rm -rf {self.workdir}/sync/{tree.name}-*")
        else:
            edit(tree)
        t0 = time.perf_counter()
        p = self.ours("sbatch", "--cluster", self.name, "--dry-run", "--nodes", "1", "train.py", cwd=tree)
        dt = time.perf_counter() - t0
        found = _SENT.search(p.stderr)
        seen.append(f"{found.group(1)} files, {found.group(2)} sent" if found else "not announced")
        return dt

    def sync_hand(self, tree: Path, fresh: bool, seen: list) -> float:
        self.master_up()
        dest = f"{self.workdir}/hand-sync/{tree.name}"
        if fresh:
            self.hand(f"rm -rf {dest} && mkdir -p {self.workdir}/hand-sync")
        else:
            edit(tree)
        rsh = shlex.join(["ssh", *self.mux])
        line = (f"{LISTING} | rsync -a --stats --from0 --files-from=- -e {shlex.quote(rsh)} ./ "
                f"{shlex.quote(self.host)}:{shlex.quote(dest)}/")
        t0 = time.perf_counter()
        p = subprocess.run(["bash", "-c", line], cwd=tree, capture_output=True, text=True, timeout=300)
        dt = time.perf_counter() - t0
        if p.returncode != 0:
            raise RuntimeError(f"rsync by hand exited {p.returncode}: {p.stderr.strip()}")
        found = _RSYNC_SENT.search(p.stdout)
        files = len(subprocess.run(["bash", "-c", LISTING], cwd=tree, capture_output=True).stdout.split(b"\0")) - 1
        seen.append(f"{files} files, {found.group(1).replace(',', '') if found else '?'} sent")
        return dt

    # 3. status ---------------------------------------------------------------------------
    def status_ours(self) -> float:
        self.master_up()
        t0 = time.perf_counter()
        self.ours("status", "--cluster", self.name)
        return time.perf_counter() - t0

    # 4. where the time goes ----------------------------------------------------------------
    def timed_hand(self, command: str) -> float:
        self.master_up()
        t0 = time.perf_counter()
        self.hand(command)
        return time.perf_counter() - t0

    def timed_local(self, argv: list) -> float:
        t0 = time.perf_counter()
        subprocess.run([str(a) for a in argv], capture_output=True, check=True, stdin=subprocess.DEVNULL)
        return time.perf_counter() - t0

    def on_cluster(self, words: str, cwd: str | None = None) -> str:
        """`slurmtorch WORDS` typed on the login host itself (no laptop in between)."""
        py = request.path_word(self.cluster.python) if "/" in self.cluster.python else self.cluster.python
        where = f"cd {cwd} && " if cwd else ""
        return f"{where}SLURMTORCH_HOME={self.workdir} {py} -m slurmtorch.cli.main {words}"

    def laptop_send(self, tree: Path) -> float:
        """sync.send as a submission runs it, with rsync replaced by nothing: the laptop's own work."""
        snap = snapshots.locate(str(tree / "train.py"), None, str(tree))
        assert snap is not None
        real = ssh.rsync
        ssh.rsync = lambda *a, **k: subprocess.CompletedProcess([], 0, b"", b"")  # type: ignore[assignment]
        try:
            t0 = time.perf_counter()
            sync.send(ssh.Connection(self.cluster, self.our_socket), snap)
            return time.perf_counter() - t0
        finally:
            ssh.rsync = real  # type: ignore[assignment]

    def rsync_folder(self, folder: Path) -> float:
        """rsync of a folder whose copy there is complete already: what a submission's sync costs
        when nothing changed (ours runs one before every submission)."""
        self.master_up()
        dest = f"{self.workdir}/hand-sync/{folder.name}"
        self.hand(f"mkdir -p {self.workdir}/hand-sync")
        argv = ["rsync", "-a", "-e", shlex.join(["ssh", *self.mux]), f"{folder}/", f"{self.host}:{dest}/"]
        subprocess.run(argv, check=True, capture_output=True)  # complete it first (untimed)
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        return time.perf_counter() - t0

    def submit_there(self, words: str, cwd: str) -> float:
        self.master_up()
        t0 = time.perf_counter()
        p = self.hand(self.on_cluster(words, cwd=cwd))
        dt = time.perf_counter() - t0
        self.cancel(p.stdout.strip().split(";")[0])
        return dt

    # 5. nemo-run -------------------------------------------------------------------------
    def nemo_target(self) -> list[str]:
        """host port user identity, as ssh itself resolves the alias (`ssh -G`)."""
        conf = {}
        for line in subprocess.run(["ssh", "-G", self.host], capture_output=True, text=True, check=True).stdout.splitlines():
            key, _, value = line.partition(" ")
            conf.setdefault(key, value)
        return [conf["hostname"], conf.get("port", "22"), conf["user"], os.path.expanduser(conf["identityfile"])]

    def submit_nemo(self, script: Path, target: list[str], split: list) -> float:
        job_dir = self.hand(f"mkdir -p {self.workdir}/nemo-run && cd {self.workdir}/nemo-run && pwd").stdout.strip()
        argv = [str(NEMO_PY), str(script), *target, job_dir, self.partition or ""]
        t0 = time.perf_counter()
        p = subprocess.run(argv, capture_output=True, text=True, cwd=self.scratch, stdin=subprocess.DEVNULL,
                           # its experiment records (~/.nemo_run) go to scratch, not the laptop's home
                           timeout=300, env={**os.environ, "HOME": str(self.scratch / "nemo-home")})
        dt = time.perf_counter() - t0
        found = re.search(r"JOB (\S+) IMPORT (\S+) SUBMIT (\S+)", p.stdout)
        if p.returncode != 0 or not found:
            said = [line for line in (p.stderr + p.stdout).splitlines() if line.strip()]
            raise RuntimeError(said[-1] if said else f"exit {p.returncode}, nothing said")
        split.append((float(found.group(2)), float(found.group(3))))
        job = re.search(r"([0-9]+)[^0-9]*$", found.group(1))  # torchx's handle: slurm_tunnel://nemo_run/...ID
        if job is None:
            raise RuntimeError(f"no job id in nemo-run's handle {found.group(1)!r}")
        self.cancel(job.group(1))
        return dt


def edit(tree: Path) -> None:
    """Change one file of the tree (size and time: rsync's quick check sees it)."""
    with open(tree / "pkg00" / "mod00.py", "a") as f:
        f.write(f"# edited {time.time_ns()}\n")


def pieces(b: Bench, tree: Path, job_dir: Path) -> dict:
    """Section 4: each piece of a forwarded command alone."""
    site = f"--site {shlex.quote(b.cluster.site)} " if b.cluster.site else ""
    py = request.path_word(b.cluster.python) if "/" in b.cluster.python else b.cluster.python
    return {
        "ssh HOST true (multiplexed): the floor of any remote command": lambda: b.timed_hand("true"),
        "ssh -O check: ours, before each command": lambda: b.timed_local(
            ["ssh", "-o", f"ControlPath={b.our_socket}", "-O", "check", b.host]),
        "laptop: slurmtorch --version (python + the CLI)": lambda: b.timed_local([*slurmtorch_cli(), "--version"]),
        "laptop: list, git, hash the 1,000 files (sync.send less rsync, in process)": lambda: b.laptop_send(tree),
        "rsync -a of the one-file folder, nothing to send (multiplexed)": lambda: b.rsync_folder(job_dir),
        "ssh HOST python -c 'import slurmtorch' (the cluster's python + the version check)":
            lambda: b.timed_hand(f"{py} -c 'import slurmtorch'"),
        "ssh HOST slurmtorch status (typed there, over ssh)": lambda: b.timed_hand(b.on_cluster("status")),
        "ssh HOST slurmtorch sbatch --dry-run in the 1,000-file mirror (typed there)":
            lambda: b.timed_hand(b.on_cluster(f"sbatch {site}--dry-run --nodes 1 train.py",
                                              cwd=f"{b.workdir}/sync/{tree.name}-*")),
        "ssh HOST slurmtorch sbatch in the one-file mirror (typed there; a job)":
            lambda: b.submit_there(f"sbatch {site}--parsable --nodes 1 --time 1 job.py", f"{b.workdir}/sync/job-*"),
    }


def pair(title: str, cases: dict, reps: int) -> str:
    """Alternate ours (the first case) with the other; a row each, and ours / this."""
    t = alternate(cases, reps)
    ours = med(next(iter(t.values())))
    rows = [[n, ms(med(v)), ms(min(v)), ms(max(v)), "" if i == 0 else f"{ours / med(v):.2f}x"]
            for i, (n, v) in enumerate(t.items())]
    return f"### {title}\n\n" + table(["how", "median", "min", "max", "ours / this"], rows)


def nemo_section(b: Bench, reps: int, job_dir: Path) -> str:
    if not NEMO_PY.exists():
        return f"### 5. nemo-run\n\nnot measured: no {NEMO_PY} ({NEMO_INSTALL})"
    version = subprocess.run([str(NEMO_PY), "-c", "import importlib.metadata as m; print(m.version('nemo_run'))"],
                             capture_output=True, text=True).stdout.strip() or "?"
    script = b.scratch / "nemo_submit.py"
    script.write_text(NEMO_SUBMIT)
    target = b.nemo_target()
    split: list = []
    try:
        b.submit_nemo(script, target, split)  # can it at all? (its first run also writes its home)
    except Exception as exc:  # noqa: BLE001 - any failure of the foreign tool is the finding
        return f"### 5. nemo-run {version}\n\nleft out: it could not submit to the testbed: {str(exc).strip()}"
    text = pair(f"5. nemo-run {version} submitting the same trivial job (a fresh process each)", {
        "slurmtorch sbatch --cluster (first connection)": lambda: b.submit_ours(job_dir, True),
        "slurmtorch sbatch --cluster (multiplexed)": lambda: b.submit_ours(job_dir, False),
        f"nemo-run {version}: SlurmExecutor + SSHTunnel (a python script)": lambda: b.submit_nemo(script, target, split),
    }, reps)
    imp, sub = med([s[0] for s in split]), med([s[1] for s in split])
    return (text + f"\n\nours / this: against our first connection. nemo-run's process, timed inside it: `import "
            f"nemo_run` {ms(imp)}, connect + submit {ms(sub)} (medians). It sends no code here (`run.Packager()`); "
            "ours syncs a one-file folder.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", required=True, help="the login host's ssh alias")
    ap.add_argument("--cluster", required=True, help="the cluster of the clusters file with host: HOST")
    ap.add_argument("--partition", default=None, help="partition for every job (default: the cluster's)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-nemo", action="store_true", help="leave nemo-run out")
    a = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="st-bench-remote-", dir="/tmp"))
    b = Bench(a.host, a.cluster, a.partition, scratch)
    out = [f"## Working from a laptop over SSH: ours beside by hand (median of {a.reps}, alternating)\n",
           f"cluster `{a.cluster}` (host `{a.host}`), {os.cpu_count()} cores, load average at start "
           f"{os.getloadavg()[0]:.1f}\n"]
    try:
        job_dir = scratch / "job"
        job_dir.mkdir()
        (job_dir / "job.py").write_text("pass\n")
        b.master_up()
        out.append(pair("1a. Submit a trivial job, first connection (no master socket)", {
            "slurmtorch sbatch --cluster": lambda: b.submit_ours(job_dir, True),
            "ssh HOST sbatch --wrap true": lambda: b.submit_hand(True),
        }, a.reps))
        out.append(pair("1b. Submit a trivial job, multiplexed (master up)", {
            "slurmtorch sbatch --cluster": lambda: b.submit_ours(job_dir, False),
            "ssh -o ControlMaster=auto -o ControlPath=.. -o ControlPersist=60 HOST sbatch --wrap true":
                lambda: b.submit_hand(False),
        }, a.reps))

        tree = make_tree(scratch / "tree1000")
        for fresh, title in ((True, "2a. Sync a 1,000-file git repository into an empty folder"),
                             (False, "2b. Sync it again after editing one file")):
            seen_ours: list = []
            seen_hand: list = []
            text = pair(title, {
                "slurmtorch sbatch --cluster --dry-run (sync + render there)":
                    lambda: b.sync_ours(tree, fresh, seen_ours),
                "git ls-files -z piped to rsync -a --files-from=- (multiplexed ssh)":
                    lambda: b.sync_hand(tree, fresh, seen_hand),
            }, a.reps)
            out.append(text + f"\n\nsent, last run: ours {seen_ours[-1]}; by hand {seen_hand[-1]}")

        folders = b.hand(f"ls {b.workdir}/jobs | wc -l", check=False).stdout.strip() or "?"
        out.append(pair("3. Job status", {
            "slurmtorch status --cluster": b.status_ours,
            "ssh HOST squeue --me (multiplexed)": lambda: b.timed_hand("squeue --me"),
        }, a.reps) + f"\n\n(the cluster's job folder holds {folders} of our jobs by now, all ended)")

        t = alternate(pieces(b, tree, job_dir), a.reps)
        out.append("### 4. Where our time goes (each piece alone, multiplexed)\n\n"
                   + table(["piece", "median", "min", "max"], [[n, ms(med(v)), ms(min(v)), ms(max(v))]
                                                               for n, v in t.items()]))
        if not a.no_nemo:
            out.append(nemo_section(b, a.reps, job_dir))
    finally:
        if b.jobs:
            b.hand("scancel " + " ".join(shlex.quote(j) for j in b.jobs), check=False)
            left = b.hand("sleep 2; squeue -h -o %i", check=False).stdout.split()
            out.append(f"{len(b.jobs)} jobs submitted and cancelled; in the queue after: {len(left)}")
        b.hand("rm -rf " + f"{b.workdir}/hand-sync", check=False)
        subprocess.run(["ssh", *b.mux, "-O", "exit", b.host], capture_output=True, stdin=subprocess.DEVNULL)
        b.close_ours()  # the run leaves no master behind (slurmtorch's own would persist 10 minutes)
        shutil.rmtree(scratch, ignore_errors=True)
    print("\n\n".join(out))


if __name__ == "__main__":
    main()
