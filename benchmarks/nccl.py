"""6. NCCL on a GPU machine: the self-check, time to ready with nccl, and two ranks on one GPU.

Runs where torch sees a GPU with NCCL (the lent H100/H200 machine: see NOTES.md for how to
run it there from carried wheels). One GPU cannot show NCCL bandwidth (a world of one
sends nothing); it shows our NCCL path end to end and its start-up cost against torchrun
and the minimal mpi4py bootstrap, and that two ranks on the one GPU are refused in one line.
"""
from __future__ import annotations

from _common import PY, REPO, Figure, alternate, env, med, mpirun, ms, needs_mpi_and_torch, python_can, table, timed

PROBE = REPO / "benchmarks" / "probe.py"
MINIMAL = REPO / "benchmarks" / "minimal_bootstrap.py"


def missing() -> str | None:
    reason = needs_mpi_and_torch()
    if reason:
        return reason
    if not python_can("import sys, torch, torch.distributed as d; "
                      "sys.exit(0 if torch.cuda.is_available() and d.is_nccl_available() else 1)"):
        return "no GPU with NCCL (torch.cuda.is_available() and NCCL built in)"
    return None


def _run(argv):
    import subprocess

    return subprocess.run([str(a) for a in argv], env=env(PROBE_BACKEND="nccl"), capture_output=True, text=True,
                          timeout=600)


def run_bench(reps: int) -> tuple[str, list[Figure]]:
    nccl = env(PROBE_BACKEND="nccl")
    check = _run([*mpirun(1), PY, "-m", "slurmtorch.bootstrap", "--backend", "nccl"])
    shared = _run([*mpirun(2), PY, "-m", "slurmtorch.bootstrap", "--backend", "nccl"])
    refused = shared.returncode != 0 and "visible GPU" in shared.stderr and "Duplicate GPU" not in shared.stderr
    cases = {
        "slurmtorch": lambda: timed([*mpirun(1), PY, "-m", "slurmtorch.bootstrap", "--backend", "nccl", PROBE],
                                    environ=nccl),
        "torchrun": lambda: timed([PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", 1, PROBE],
                                  environ=nccl),
        "minimal": lambda: timed([*mpirun(1), PY, MINIMAL, PROBE], environ=nccl),
    }
    t = alternate(cases, reps)
    ours = med(t["slurmtorch"])
    rows = [[name, ms(med(v)), f"{ours / med(v):.2f}x"] for name, v in t.items()]
    last = (check.stdout.strip().splitlines() or ["(no output)"])[-1]
    why = [line for line in shared.stderr.splitlines() if "visible GPU" in line][:1]
    text = ("## 6. NCCL on one GPU\n\n"
            f"Self-check `mpirun -n 1 python -m slurmtorch.bootstrap --backend nccl`: exit {check.returncode}, "
            f"`{last}`\n\nTime to ready with nccl, 1 rank (median of {reps}; ratios slurmtorch / this, lower is "
            "faster):\n\n" + table(["command", "median", "slurmtorch / this"], rows)
            + "\n\nTwo ranks on the one GPU (`mpirun -n 2 ... --backend nccl`): "
            + (f"refused before the group, exit {shared.returncode}: `{why[0].strip()}`" if refused else
               f"**not refused cleanly** (exit {shared.returncode}); stderr ends: "
               f"`{shared.stderr.strip().splitlines()[-1:] }`"))
    return text, [Figure("nccl ready, 1 rank, vs torchrun", ours / med(t["torchrun"])),
                  Figure("nccl ready, 1 rank, vs minimal", ours / med(t["minimal"]))]
