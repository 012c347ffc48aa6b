"""Recorded node topologies (tests/topologies/<name>/topology.json, each README citing its
source) written out as the sysfs trees they describe, for the placement reader and policy."""

from __future__ import annotations

import os
from pathlib import Path

from slurmtorch.bootstrap.placement import cpu_list, parse_cpu_list

TOPOLOGIES = Path(__file__).parent / "topologies"
MACHINES = sorted(p.name for p in TOPOLOGIES.iterdir() if (p / "topology.json").exists())


def write_sysfs(spec: dict, root: Path) -> Path:
    """The sysfs tree `spec` records, under `root` (the files the reader looks at, and links
    where sysfs has them)."""
    sys_ = root / "sys"
    cpus: set[int] = set()
    for node, text in spec["numa"].items():
        d = sys_ / f"devices/system/node/node{node}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(text + "\n")
        cpus |= parse_cpu_list(text)
    offset = spec.get("smt_offset")
    for cpu in sorted(cpus):
        d = sys_ / f"devices/system/cpu/cpu{cpu}/topology"
        d.mkdir(parents=True)
        first = cpu - offset if offset and cpu >= offset else cpu
        (d / "thread_siblings_list").write_text(f"{first},{first + offset}\n" if offset else f"{cpu}\n")

    def device(entry: dict, cls: str, vendor: str) -> Path:
        d = sys_ / "devices/pci" / entry["address"]
        d.mkdir(parents=True)
        node = entry["numa_node"]
        (d / "class").write_text(entry.get("class", cls) + "\n")
        (d / "vendor").write_text(entry.get("vendor", vendor) + "\n")
        (d / "numa_node").write_text(f"{node}\n")
        (d / "local_cpulist").write_text(spec["numa"].get(str(node), cpu_list(cpus)) + "\n")
        link = sys_ / "bus/pci/devices" / entry["address"]
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(d, link.parent))
        return d

    for gpu in spec["gpus"]:
        device(gpu, "0x030200", "0x10de")
        if gpu.get("uuid"):  # as the NVIDIA driver lists its GPUs
            info = root / "proc/driver/nvidia/gpus" / gpu["address"]
            info.mkdir(parents=True)
            (info / "information").write_text(f"Model: \t\t NVIDIA GH200 120GB\nGPU UUID: \t {gpu['uuid']}\n"
                                              f"Bus Location: \t {gpu['address']}\n")
    for other in spec.get("other_pci", []):
        device(other, "0x030000", "0x1a03")
    for nic in spec["nics"]:
        d = device(nic, "0x020700", "0x15b3")
        owner = sys_ / "class" / ("infiniband" if nic["class"] == "infiniband" else "net") / nic["name"]
        owner.mkdir(parents=True)
        (owner / "device").symlink_to(os.path.relpath(d, owner))
    return root




# A two-socket GPU node the size of this host (CPUs 0 and 1): one CPU, one GPU and one NIC per
# NUMA node, for tests that apply a placement to a real process here.
TWO_SOCKETS = {"numa": {"0": "0", "1": "1"}, "smt_offset": None,
               "gpus": [{"address": "0000:17:00.0", "numa_node": 0}, {"address": "0000:65:00.0", "numa_node": 1}],
               "nics": [{"name": "mlx5_0", "address": "0000:18:00.0", "numa_node": 0, "class": "infiniband"},
                        {"name": "mlx5_1", "address": "0000:66:00.0", "numa_node": 1, "class": "infiniband"}]}
