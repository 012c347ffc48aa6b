"""7. NCCL's flight recorder on a GPU machine (issue 26): a real dump, and what the recorder costs.

Runs where torch sees a GPU with NCCL (the lent H100/H200 machine: NOTES.md says how to run
there from carried wheels). Three parts, one run:

- A real dump: one rank under the bootstrap, in a job folder, whose second all_reduce cannot
  start before a 15 s GPU spin while the group's timeout is 5 s. torch's watchdog times the
  collective out and writes the recorder into the job folder's flight/ (the bootstrap pointed it
  there); slurmtorch's summariser (`submit.jobfolder.flightdump`, the one `slurmtorch stacks`
  and the failure report use) reads it back with its plain-values unpickler.
- Time to ready with nccl, recorder on (the bootstrap's default in a job folder) vs off
  (TORCH_NCCL_TRACE_BUFFER_SIZE=0, which the bootstrap keeps), same run, alternating.
- A training step, on vs off: a 4096x4096 bf16 matmul and an all_reduce of 16 MiB, and a
  tiny all_reduce alone (one float: the recorder's cost per collective, with nothing to hide it).
  One GPU means a world of one: NCCL still enqueues each collective and the recorder still
  records it, which is the cost in question; bandwidth is not.

    python benchmarks/flightrecorder.py [--reps 5]

Ratios are on / off: 1.00 is free. The stacks handler is off in both (SLURMTORCH_NO_STACKS=1)
so that the recorder is the only difference.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path

from _common import PY, REPO, alternate, env, med, mpirun, ms, run, table, timed
from nccl import missing  # the same need: a GPU with NCCL, mpirun and mpi4py

PROBE = REPO / "benchmarks" / "probe.py"
HERE = Path(__file__).resolve().parent

TIMEOUT_SCRIPT = """\
import torch, torch.distributed as dist
dist.all_reduce(torch.ones(1, device="cuda"))      # collective #1 completes
torch.cuda.synchronize()
torch.cuda._sleep(int(3e10))                       # ~15 s of GPU spin on the current stream
dist.all_reduce(torch.ones(1, device="cuda"))      # #2 waits for the spin: times out at 5 s
torch.cuda.synchronize()
print("not reached: the watchdog should have ended this rank", flush=True)
"""

STEP_SCRIPT = """\
import statistics, sys, time
import torch, torch.distributed as dist
steps, kind = int(sys.argv[1]), sys.argv[2]
if kind == "train":
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    g = torch.randn(4 * 2**20, device="cuda")     # 16 MiB of gradients
else:
    g = torch.ones(1, device="cuda")
def step():
    if kind == "train":
        (x @ w).sum()
    dist.all_reduce(g)
for _ in range(20):
    step()
torch.cuda.synchronize()
times = []
for _ in range(5):
    t = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    times.append((time.perf_counter() - t) / steps)
print(f"step_s {statistics.median(times):.9f}")
"""


def real_dump(folder: Path) -> str:
    """Run the timing-out rank in `folder` and say what the dump and the summariser show."""
    import subprocess

    script = folder / "timeout.py"
    script.write_text(TIMEOUT_SCRIPT)
    e = env(SLURMTORCH_JOB_DIR=str(folder), SLURMTORCH_NO_STACKS="1")
    p = subprocess.run([str(a) for a in [*mpirun(1), PY, "-m", "slurmtorch.bootstrap", "--backend", "nccl",
                                         "--timeout", "5", script]],
                       env=e, capture_output=True, text=True, timeout=300)
    sys.path.insert(0, str(REPO))
    from slurmtorch.submit.jobfolder import flightdump

    files = sorted((folder / "flight").glob("*")) if (folder / "flight").is_dir() else []
    dumps = flightdump.load_folder(folder)
    lines = flightdump.summary_lines(dumps, ranks=1)
    keys = sorted(dumps[0]) if 0 in dumps else []
    states = [(e.get("collective_seq_id"), e.get("profiling_name"), e.get("state"))
              for e in (dumps[0]["entries"] if 0 in dumps else [])]
    tail = "\n".join(p.stderr.strip().splitlines()[-6:])
    return ("## 7a. A real flight-recorder dump (1 rank, nccl, --timeout 5, collective #2 held by a GPU spin)\n\n"
            f"rank exit {p.returncode}; files in flight/: {[f.name for f in files]} "
            f"({', '.join(str(f.stat().st_size) + ' B' for f in files)})\n\n"
            f"dump keys: {keys}\n\nentries (seq, name, state): {states}\n\n"
            "summariser:\n\n" + ("\n".join(f"    {line}" for line in lines) or "    (nothing: no dump read)")
            + "\n\nrank's stderr ends:\n\n" + "\n".join(f"    {line}" for line in tail.splitlines()))


def costs(folder: Path, reps: int) -> str:
    step = folder / "step.py"
    step.write_text(STEP_SCRIPT)
    base = {"SLURMTORCH_JOB_DIR": str(folder), "SLURMTORCH_NO_STACKS": "1", "PROBE_BACKEND": "nccl"}
    variants = {"recorder on": env(**base), "recorder off": env(**base, TORCH_NCCL_TRACE_BUFFER_SIZE="0")}
    boot = [*mpirun(1), PY, "-m", "slurmtorch.bootstrap", "--backend", "nccl"]
    ready = alternate({k: (lambda e=e: timed([*boot, PROBE], environ=e)) for k, e in variants.items()}, reps)
    steps: dict[tuple[str, str], list[float]] = {}

    def one(name: str, kind: str, n: int) -> float:
        out = run([*boot, step, n, kind], environ=variants[name]).stdout
        steps.setdefault((name, kind), []).append(float(re.search(r"step_s (\S+)", out).group(1)))
        return 0.0

    for kind, n in (("train", 200), ("tiny", 2000)):
        alternate({k: (lambda k=k, kind=kind, n=n: one(k, kind, n)) for k in variants}, reps)
    off_ready = med(ready["recorder off"])
    rows = []
    for name in variants:
        r = med(ready[name])
        row = [name, ms(r), f"{r / off_ready:.3f}x"]
        for kind in ("train", "tiny"):
            s, s_off = statistics.median(steps[(name, kind)]), statistics.median(steps[("recorder off", kind)])
            row += [f"{s * 1e6:.1f} us", f"{s / s_off:.3f}x"]
        rows.append(row)
    return (f"## 7b. The flight recorder's cost, 1 rank, nccl, median of {reps} (same run, alternating)\n\n"
            + table(["case", "time to ready", "vs off", "train step (matmul + 16 MiB all_reduce)", "vs off",
                     "tiny all_reduce", "vs off"], rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    why = missing()
    if why:
        sys.exit(f"flightrecorder: cannot run here: {why}")
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        print(real_dump(Path(a)), flush=True)
        print(flush=True)
        print(costs(Path(b), args.reps), flush=True)


if __name__ == "__main__":
    os.chdir(HERE)
    main()
