"""The node's topology, read from sysfs (the edge of `placement`).

From the node itself, not a site file: NUMA nodes' CPUs (/sys/devices/system/node/node*/cpulist),
each CPU's core (cpu*/topology/thread_siblings_list), the GPUs among the PCI devices
(/sys/bus/pci/devices/*/{class,vendor,numa_node,local_cpulist}) and the network cards
(/sys/class/infiniband/*/device; else Slingshot's and IPoIB's hsn*/ib* in /sys/class/net), and an
NVIDIA GPU's UUID (/proc/driver/nvidia/gpus/<address>/information), which CUDA_VISIBLE_DEVICES
may name it by: what NVML would say, without loading it.
`root` lets tests read a recorded tree. Unreadable parts are left out, never guessed:
no GPU or no NUMA node read leaves `placement` to share the allowed CPUs, or do nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from slurmtorch.bootstrap.placement import Device, Topology, parse_cpu_list

# PCI classes of a GPU: VGA (0x0300), 3D controller (0x0302, NVIDIA's data-centre GPUs),
# display controller (0x0380, AMD Instinct); from NVIDIA (0x10de) or AMD's GPU arm (0x1002),
# which leaves out a BMC's VGA (ASPEED, 0x1a03).
GPU_CLASSES = ("0x0300", "0x0302", "0x0380")
GPU_VENDORS = ("0x10de", "0x1002")


def read(root: str | os.PathLike = "/", cores_for: Iterable[int] | None = None) -> Topology | None:
    """The topology under `root` (a sysfs tree's parent), or None when nothing of it is readable.

    `cores_for`: the CPUs whose cores to read (None: all). A file per CPU is most of the cost
    (40 ms for a GH200 node's 288), and only ranks that divide CPUs need their cores."""
    try:
        return _read(Path(root), cores_for)
    except (OSError, ValueError):  # a file of a form not foreseen: no placement, never a failed rank
        return None


def _read(root: Path, cores_for: Iterable[int] | None) -> Topology | None:
    sys_ = root / "sys"
    numa = _numa(sys_ / "devices/system/node")
    gpus = tuple(sorted((_uuid(d, root / "proc/driver/nvidia/gpus") for d in _pci(sys_ / "bus/pci/devices")
                         if d is not None), key=lambda d: d.address))
    nics = _nics(sys_)
    if not numa and not gpus:
        return None
    return Topology(numa=numa, gpus=gpus, nics=nics, cores=_cores(sys_ / "devices/system/cpu", cores_for))


def _text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _numa(folder: Path) -> dict[int, frozenset[int]]:
    out: dict[int, frozenset[int]] = {}
    for node in _listing(folder, "node"):
        text = _text(node / "cpulist")
        if text and node.name[4:].isdigit():
            out[int(node.name[4:])] = parse_cpu_list(text)  # CPU-less nodes (GH200's HBM) left out
    return out


def _cores(folder: Path, cpus: Iterable[int] | None) -> dict[int, int]:
    if cpus is None:
        cpus = [int(p.name[3:]) for p in _listing(folder, "cpu") if p.name[3:].isdigit()]
    out: dict[int, int] = {}
    for cpu in cpus:
        try:
            with open(f"{folder}/cpu{cpu}/topology/thread_siblings_list") as f:
                siblings = parse_cpu_list(f.read())
        except (OSError, ValueError):
            continue
        if siblings:
            out[cpu] = min(siblings)
    return out


def _listing(folder: Path, prefix: str) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.name.startswith(prefix))
    except OSError:
        return []


def _device(path: Path, name: str = "", rdma: bool = False) -> Device:
    node = _text(path / "numa_node")
    cpus = _text(path / "local_cpulist")
    return Device(address=path.resolve().name, numa_node=int(node) if node and node.lstrip("-").isdigit() else -1,
                  cpus=parse_cpu_list(cpus) if cpus else frozenset(), name=name, rdma=rdma)


def _pci(folder: Path):
    for dev in _listing(folder, ""):
        cls, vendor = _text(dev / "class") or "", _text(dev / "vendor") or ""
        yield _device(dev) if cls[:6] in GPU_CLASSES and vendor in GPU_VENDORS else None


def _uuid(gpu: Device, folder: Path) -> Device:
    """`gpu` with its UUID, from the NVIDIA driver's `information` file ("GPU UUID: GPU-...")."""
    for line in (_text(folder / gpu.address / "information") or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "GPU UUID":
            return replace(gpu, uuid=value.strip())
    return gpu


def _nics(sys_: Path) -> tuple[Device, ...]:
    rdma = [_device(p / "device", p.name, True) for p in _listing(sys_ / "class/infiniband", "") if (p / "device").exists()]
    if rdma:
        return tuple(rdma)
    return tuple(_device(p / "device", p.name) for p in _listing(sys_ / "class/net", "")
                 if p.name.startswith(("hsn", "ib")) and (p / "device").exists())
