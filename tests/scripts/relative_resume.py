"""Trains EPOCHS epochs, resuming from a checkpoint at a relative path: `relative_resume.py EPOCHS [CKPT] [--NAME V]...`.

CKPT (default `ckpt.pt`) is read if it is there, and written with the epochs done; rank 0
prints one line per epoch and at the end `trained N epochs from E in CWD`, N the epochs
this start trained (0: another run's checkpoint was found). Plain files: no torch needed.
"""
import os
import sys
from pathlib import Path

epochs = int(sys.argv[1])
named = len(sys.argv) > 2 and not sys.argv[2].startswith("--")  # a sweep's --NAME VALUE come after
ckpt = Path(sys.argv[2] if named else "ckpt.pt")
rank = int(os.environ.get("RANK", "0"))
start = int(ckpt.read_text()) if ckpt.exists() else 0
for epoch in range(start, epochs):
    if rank == 0:
        print(f"epoch {epoch}", flush=True)
if rank == 0:
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    ckpt.write_text(f"{epochs}\n")
    print(f"trained {epochs - start} epochs from {start} in {os.getcwd()}", flush=True)
