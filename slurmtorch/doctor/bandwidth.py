"""all_reduce bandwidth: the sweep over message sizes, its table, and the comparison with
the node type's link speed (bus bandwidth as nccl-tests computes it).

`sweep` runs collectives with the torch it is handed (the allocation check imports
torch; this module does not); the rest is pure.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from slurmtorch.doctor.checks import OK, WARN, Check

# Message sizes of the all_reduce table: 1 KiB .. 16 MiB in steps of 4x.
DEFAULT_SIZES = tuple(1024 * 4 ** i for i in range(8))

# Bus bandwidth at the largest size, as a share of the link, below which we warn.
# 16 MiB is far from saturating fast fabrics; this flags a wrong path (TCP over the
# management network instead of RDMA), not tuning headroom.
LINK_SHARE_WARN = 0.25


@dataclass(frozen=True)
class Sample:
    """One message size of the all_reduce sweep."""

    nbytes: int
    seconds: float  # per all_reduce
    iters: int


def bus_factor(world_size: int) -> float:
    """nccl-tests' bus bandwidth factor for all_reduce: each rank sends/receives 2(n-1)/n of the data."""
    return 2.0 * (world_size - 1) / world_size if world_size > 1 else 1.0


def human_bytes(n: int) -> str:
    for unit, size in (("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def bandwidth_table(samples: Sequence[Sample], world_size: int) -> list[str]:
    """Size, time per op, algorithm and bus bandwidth (GB/s = 1e9 bytes/s, as nccl-tests)."""
    rows = [("size", "time/op", "algbw GB/s", "busbw GB/s", "busbw Gb/s", "iters")]
    for s in samples:
        alg = s.nbytes / s.seconds / 1e9
        bus = alg * bus_factor(world_size)
        rows.append((human_bytes(s.nbytes), f"{s.seconds * 1e3:.3f} ms", f"{alg:.3f}", f"{bus:.3f}",
                     f"{bus * 8:.2f}", str(s.iters)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in rows]


def link_gbps(nt) -> float | None:
    """The node type's link speed in Gb/s, if the site config gives one (`link_gbps`)."""
    value = getattr(nt, "link_gbps", None) if nt is not None else None
    return float(value) if value else None


def check_bandwidth(samples: Sequence[Sample], world_size: int, num_nodes: int, nt,
                    iface_mbps: int | None = None) -> list[Check]:
    """The largest message's bus bandwidth against the node type's link speed."""
    if not samples or num_nodes < 2:
        return [Check(OK, "bandwidth: one node only, nothing crosses a link")] if samples else []
    top = max(samples, key=lambda s: s.nbytes)
    bus_gbps = top.nbytes / top.seconds / 1e9 * bus_factor(world_size) * 8
    measured = f"all_reduce bus bandwidth at {human_bytes(top.nbytes)}: {bus_gbps:.2f} Gb/s"
    iface = f"; the interface reports {iface_mbps / 1000:g} Gb/s" if iface_mbps and iface_mbps > 0 else ""
    if nt is None:
        return [Check(WARN, f"{measured}; no site given, so no link speed to compare with{iface}",
                      "pass --site NAME|PATH (or set SLURMTORCH_SITE)")]
    link = link_gbps(nt)
    if link is None:
        name = getattr(nt, "name", "?")
        return [Check(WARN, f"{measured}; the site gives no link speed for node type {name!r} to compare with{iface}",
                      f"add link_gbps: <Gb/s per node> to node_types.{name} in the site config")]
    share = bus_gbps / link
    text = f"{measured} = {share:.0%} of the node type's {link:g} Gb/s link"
    if share < LINK_SHARE_WARN:
        return [Check(WARN, text + f" (below {LINK_SHARE_WARN:.0%})",
                      "check that traffic takes the fast fabric: NCCL_DEBUG=INFO shows the transport; "
                      "interfaces/hcas in the site config")]
    return [Check(OK, text)]


def sweep(dist, torch, sizes: Sequence[int], device, budget_s: float) -> list[Sample]:
    """all_reduce of each size: a warm-up, then as many ops as fit the budget (agreed by MAX)."""
    samples = []
    for nbytes in sizes:
        x = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=device)
        dist.all_reduce(x)  # warm-up: connections, buffers
        _sync(torch, device)
        t = time.perf_counter()
        dist.all_reduce(x)
        _sync(torch, device)
        one = max(time.perf_counter() - t, 1e-6)
        iters = torch.tensor([min(200, max(2, int(budget_s / one)))], dtype=torch.int64, device=device)
        dist.all_reduce(iters, op=dist.ReduceOp.MAX)  # every rank must run the same count
        n = int(iters.item())
        dist.barrier()
        t = time.perf_counter()
        for _ in range(n):
            dist.all_reduce(x)
        _sync(torch, device)
        elapsed = torch.tensor([time.perf_counter() - t], dtype=torch.float64, device=device)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank's view
        samples.append(Sample(nbytes, float(elapsed.item()) / n, n))
    return samples


def _sync(torch, device) -> None:
    if getattr(device, "type", device) == "cuda":
        torch.cuda.synchronize()

