"""Container probe: what a rank sees of the image and of the site, as one JSON line, then the
README's example (examples/train_ddp.py, beside this folder) run as `__main__` with the
arguments given. Needs nothing outside Python's standard library and torch: a minimal image
has no `ip`. The example calls init_process_group itself, so the bootstrap runs with --no-init
or leaves the group to it; either way this probe looks before any training.
"""

import fcntl
import json
import os
import runpy
import socket
import struct
import sys
from pathlib import Path

import torch

SIOCGIFADDR = 0x8915  # <linux/sockios.h>: an interface's IPv4 address


def address(ifname: str) -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", ifname.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def plugin_files() -> list[str]:
    first = os.environ.get("LD_LIBRARY_PATH", "").split(":")[0]
    return sorted(p.name for p in Path(first).glob("*")) if first else []


marker = Path("/etc/slurmtorch-image")
record = {
    "rank": int(os.environ["RANK"]), "host": socket.gethostname(),
    "image": marker.read_text().strip() if marker.exists() else None,
    "python": sys.executable, "torch": str(Path(torch.__file__).parent),
    "CH_RUNNING": os.environ.get("CH_RUNNING"),
    "SLURMTORCH_IMAGE": os.environ.get("SLURMTORCH_IMAGE"),
    "LD_LIBRARY_PATH": os.environ.get("LD_LIBRARY_PATH"), "plugin_files": plugin_files(),
    "SITE_GREETING": os.environ.get("SITE_GREETING"),
    "MASTER_ADDR": os.environ["MASTER_ADDR"], "eth0": address("eth0"), "ib0": address("ib0"),
}
print("CONTAINER " + json.dumps(record), flush=True)

example = Path(__file__).resolve().parent.parent.parent / "examples" / "train_ddp.py"
sys.argv = [str(example), *sys.argv[1:]]
runpy.run_path(str(example), run_name="__main__")
