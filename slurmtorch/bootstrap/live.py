"""A rank's live sample: its step time, CPU, memory and GPU, written where `slurmtorch top` looks.

Started when the job sets SLURMTORCH_LIVE_S (the batch script does, 10 s unless the user
set another; 0 turns it off). A daemon thread replaces `$SLURMTORCH_JOB_DIR/.live/start-K/rank-R.json`
(K: this start of the job, `restart_count()`)
every interval with one JSON object (rankfiles.live_record; a reader never sees half of it).

The step time needs nothing in the script: torch's global optimizer hook
(`register_optimizer_step_post_hook`) notes the time of every `step()` of the first
optimizer that steps (one step per iteration, even with several optimizers), and
`torch.autograd.backward`, which `loss.backward()` calls, is wrapped to time backward
(Steps says why). Both are set once `torch.optim` has been imported, by the bootstrap or
the script, at the next sample.
The GPU's figures come from NVML (`nvidia-ml-py`), or ROCm's `amdsmi` on AMD, where it
imports and a GPU is visible; nothing is imported to launch without one. The cost is a hook call per step (a clock read
and an append) and one small file write per interval: benchmarks/live_cost.py measures it.
"""

from __future__ import annotations

import atexit
import importlib
import os
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from slurmtorch import protocol, rankfiles, readback
from slurmtorch.bootstrap.heartbeat import periodic_file
from slurmtorch.bootstrap.preempt import restart_count
from slurmtorch.pace import Streak

WINDOW = 20  # step intervals in the recent mean; the window before them is the trend
# NVML's clock-event (throttle) reason bits, by name (nvml.h's nvmlClocksEventReason*).
THROTTLE_BITS = (("idle", 0x1), ("app_clocks", 0x2), ("sw_power_cap", 0x4), ("hw_slowdown", 0x8),
                 ("sync_boost", 0x10), ("sw_thermal", 0x20), ("hw_thermal", 0x40), ("power_brake", 0x80),
                 ("display_clocks", 0x100))
_STOPPED = threading.Event()


class Steps:
    """The steps of one optimizer (the first that steps): when each ended, and how much of
    each was backward. In synchronous training every rank steps at the pace of the slowest,
    so the step time alone cannot name it; what differs is the time outside backward (where
    DDP's all-reduce waits): the slow rank spends longer there, its peers wait in backward."""

    def __init__(self) -> None:
        self.recent: deque[tuple[float, float]] = deque(maxlen=2 * WINDOW)  # (step, its backward)
        self.count = 0
        self.first: float | None = None
        self.last: float | None = None
        self.owner: int | None = None
        self.backward = 0.0  # seconds in backward since the last step
        self.own_total = 0.0  # the whole run's time outside backward, over its timed steps

    def stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """torch's global optimizer step post-hook."""
        if self.owner is None:
            self.owner = id(optimizer)
        elif id(optimizer) != self.owner:
            return
        now = time.time()
        if self.last is not None:
            step = now - self.last
            self.recent.append((step, min(self.backward, step)))
            self.own_total += step - min(self.backward, step)
        self.first = self.first if self.first is not None else now
        self.last = now
        self.count += 1
        self.backward = 0.0

    def timed(self, backward: Any) -> Any:
        """`torch.autograd.backward` (what `loss.backward()` calls), adding its time to this step's."""
        def timed_backward(*args: Any, **kwargs: Any) -> Any:
            start = time.monotonic()
            try:
                return backward(*args, **kwargs)
            finally:
                self.backward += time.monotonic() - start
        timed_backward.__wrapped__ = backward  # type: ignore[attr-defined]  # functools.wraps' marker
        timed_backward.__doc__ = backward.__doc__
        return timed_backward

    def figures(self) -> dict[str, Any]:
        """steps; the mean of the last WINDOW steps (step_s) and of the WINDOW before (trend_s);
        the recent mean time outside backward (own_s) and the whole run's (own_mean_s); the first
        and last step's time (the whole run's mean step is their span over steps - 1)."""
        steps = list(self.recent)
        recent, before = steps[-WINDOW:], steps[:-WINDOW]
        return {"steps": self.count,
                "step_s": sum(t for t, _ in recent) / len(recent) if recent else None,
                "own_s": sum(t - b for t, b in recent) / len(recent) if recent else None,
                "trend_s": sum(t for t, _ in before) / len(before) if before else None,
                "own_mean_s": self.own_total / (self.count - 1) if self.count > 1 else None,
                "first_step": self.first, "last_step": self.last}


class Sampler:
    """What one rank writes each interval: its steps, CPU share, resident memory and GPU."""

    def __init__(self, path: str, rank: int, host: str, gpu: Any = None) -> None:
        self.path, self.rank, self.host, self.gpu = path, rank, host, gpu
        self.steps = Steps()
        self.since = time.time()
        self.hooked = False
        self._cpu = (time.monotonic(), time.process_time())

    def hook_steps(self) -> None:
        """Once torch.optim is imported (by the bootstrap or the script): the step hook, and
        backward timed. From this thread: each is one assignment the main thread sees whole."""
        if self.hooked or "torch.optim" not in sys.modules:
            return
        self.hooked = True
        try:
            import torch.autograd
            from torch.optim.optimizer import register_optimizer_step_post_hook
        except ImportError:
            return  # a torch without global optimizer hooks: no step time
        register_optimizer_step_post_hook(self.steps.stepped)
        if not hasattr(torch.autograd.backward, "__wrapped__"):
            torch.autograd.backward = self.steps.timed(torch.autograd.backward)

    def cpu_percent(self) -> float:
        """This process's CPU use since the last sample, in % of one core."""
        wall, cpu = time.monotonic(), time.process_time()
        (w0, c0), self._cpu = self._cpu, (wall, cpu)
        return 100.0 * (cpu - c0) / (wall - w0) if wall > w0 else 0.0

    def record(self, ended: bool = False) -> str:
        gpu = self.gpu.sample() if self.gpu is not None else None
        return rankfiles.live_record(written=time.time(), since=self.since, rank=self.rank, host=self.host,
                                    cpu=self.cpu_percent(), rss=_rss(), gpu=gpu, ended=ended,
                                    **self.steps.figures())

    def write(self, ended: bool = False) -> None:
        self.hook_steps()
        tmp = f"{self.path}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(self.record(ended))
            os.replace(tmp, self.path)
        except OSError:
            pass  # a full disk or a folder gone: no sample this time, never a failed rank


class Straggler:
    """Rank 0's watch (SLURMTORCH_STRAGGLER=MARGIN): a rank slower than the median by the margin
    (pace.Streak) in `RUNS` samples running is named once on rank 0's stderr, which `--wait`
    streams and the job's logs keep."""

    RUNS = 3

    def __init__(self, folder: str, margin: float) -> None:
        self.folder, self.margin = folder, margin
        self.streak = Streak(margin, self.RUNS)
        self.named: set[int] = set()

    def look(self) -> str | None:
        """The line to print after this sample, if any."""
        samples = {}
        for name in os.listdir(self.folder):
            if name.endswith(".json"):
                try:
                    text = readback.read_text(Path(self.folder) / name, readback.SAMPLE)
                except readback.NotRead:
                    continue  # a FIFO a script left there must not hang rank 0
                sample = rankfiles.parse_live(text) if text is not None else None
                if sample is not None:
                    samples[sample.rank] = sample
        found = self.streak.feed(samples)
        if found is None or found[0].rank in self.named:
            return None
        sample, slow, median = found
        self.named.add(sample.rank)
        return (f"slurmtorch: straggler: rank {sample.rank} on {sample.host} spends {slow / median:.2f}x the median "
                f"time {'outside backward' if sample.own_s is not None else 'a step'} ({slow:.3g} s against "
                f"{median:.3g} s) for {self.RUNS} samples running (SLURMTORCH_STRAGGLER={self.margin:g})\n")


def throttle_names(mask: int) -> list[str]:
    return [name for name, bit in THROTTLE_BITS if mask & bit]


def _rss() -> int | None:
    """Resident memory in bytes (Linux's /proc/self/statm), None where there is none."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class NvmlGpu:
    """One GPU through NVML: utilisation, memory, power, SM clock, throttle reasons, energy."""

    def __init__(self, nvml: Any, handle: Any, index: str) -> None:
        self.nvml, self.handle, self.index = nvml, handle, index
        self.energy_start = self._energy()

    def _energy(self) -> float | None:
        try:
            return self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle) / 1000.0  # mJ -> J
        except Exception:  # noqa: BLE001 - not every GPU reports it (pre-Volta)
            return None

    def sample(self) -> dict[str, Any] | None:
        n, h = self.nvml, self.handle
        return gpu_figures(self.index, self.energy_start, self._energy(), (
            ("util", lambda: n.nvmlDeviceGetUtilizationRates(h).gpu),
            ("mem", lambda: n.nvmlDeviceGetMemoryInfo(h).used),
            ("mem_total", lambda: n.nvmlDeviceGetMemoryInfo(h).total),
            ("power_w", lambda: n.nvmlDeviceGetPowerUsage(h) / 1000.0),
            ("sm_mhz", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
            ("throttle", lambda: throttle_names(_reasons(n)(h)))))


class AmdGpu:
    """One AMD GPU (an MI250X GCD) through ROCm's amdsmi: activity, VRAM, power, GFX clock, energy."""

    def __init__(self, amdsmi: Any, handle: Any, index: str) -> None:
        self.amdsmi, self.handle, self.index = amdsmi, handle, index
        self.energy_start = self._energy()

    def _energy(self) -> float | None:
        try:
            e = self.amdsmi.amdsmi_get_energy_count(self.handle)
            return e["energy_accumulator"] * e["counter_resolution"] / 1e6  # microjoules -> J
        except Exception:  # noqa: BLE001 - a figure this GPU or driver does not give
            return None

    def sample(self) -> dict[str, Any] | None:
        a, h = self.amdsmi, self.handle
        return gpu_figures(self.index, self.energy_start, self._energy(), (
            ("util", lambda: a.amdsmi_get_gpu_activity(h)["gfx_activity"]),
            ("mem", lambda: a.amdsmi_get_gpu_vram_usage(h)["vram_used"] << 20),  # MiB
            ("mem_total", lambda: a.amdsmi_get_gpu_vram_usage(h)["vram_total"] << 20),
            ("power_w", lambda: a.amdsmi_get_power_info(h)["average_socket_power"]),
            ("sm_mhz", lambda: a.amdsmi_get_clock_info(h, a.AmdSmiClkType.GFX)["clk"]),
            ("throttle", lambda: None)))


def gpu_figures(index: str, energy_start: float | None, energy: float | None, reads) -> dict[str, Any]:
    """A GPU's sample: each (key, read) read, None for a figure it does not give; energy since the start."""
    out: dict[str, Any] = {"index": index}
    for key, read in reads:
        try:
            out[key] = read()
        except Exception:  # noqa: BLE001 - a figure this GPU or driver does not give
            out[key] = None
    out["energy_j"] = None if energy is None or energy_start is None else energy - energy_start
    return out


def _reasons(nvml: Any) -> Any:
    """NVML's clock-event reasons (named throttle reasons before driver 535's nvml)."""
    return getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or nvml.nvmlDeviceGetCurrentClocksThrottleReasons


def rank_device(local_rank: int, visible_var: str, count: int, environ=os.environ) -> tuple[int | None, str]:
    """(index among all of the node's GPUs, or None for a UUID; the device as named) of this
    rank's GPU: its LOCAL_RANK's among the visible ones, as torch picks its device (pure)."""
    visible = [v.strip() for v in environ.get(visible_var, "").split(",") if v.strip()]
    slot = local_rank % (len(visible) or count or 1)
    if not visible:
        return slot, str(slot)
    named = visible[slot]
    return (int(named), named) if named.isdigit() else (None, named)


def gpu_monitor(local_rank: int, environ=os.environ) -> NvmlGpu | AmdGpu | None:
    """This rank's GPU, through NVML (nvidia-ml-py) or amdsmi (ROCm), or None: neither library,
    no driver, or no GPU visible. Imported only where the device files are."""
    try:
        if os.path.exists("/dev/nvidiactl") and environ.get("CUDA_VISIBLE_DEVICES", None) != "":
            nvml = importlib.import_module("pynvml")
            nvml.nvmlInit()
            index, named = rank_device(local_rank, "CUDA_VISIBLE_DEVICES", nvml.nvmlDeviceGetCount(), environ)
            handle = (nvml.nvmlDeviceGetHandleByIndex(index) if index is not None
                      else nvml.nvmlDeviceGetHandleByUUID(named))
            return NvmlGpu(nvml, handle, named)
        if os.path.exists("/dev/kfd") and environ.get("ROCR_VISIBLE_DEVICES", None) != "":
            amdsmi = importlib.import_module("amdsmi")
            amdsmi.amdsmi_init()
            handles = amdsmi.amdsmi_get_processor_handles()
            var = "ROCR_VISIBLE_DEVICES" if environ.get("ROCR_VISIBLE_DEVICES") else "HIP_VISIBLE_DEVICES"
            index, named = rank_device(local_rank, var, len(handles), environ)
            return AmdGpu(amdsmi, handles[index if index is not None else 0], named) if handles else None
    except Exception:  # noqa: BLE001 - no GPU library here is no live GPU figures, never a failed rank
        return None
    return None


def start(rank: int, host: str, local_rank: int, environ=os.environ) -> threading.Thread | None:
    """Start sampling if the job asked for it (SLURMTORCH_LIVE_S > 0 and a job folder); None otherwise."""
    target = periodic_file(environ, protocol.LIVE_S, protocol.LIVE, protocol.live_name(rank, restart_count(environ)))
    if target is None:
        return None
    path, interval = target
    sampler = Sampler(path, rank, host, gpu_monitor(local_rank, environ))
    sampler.write()
    thread = threading.Thread(target=_sample, args=(sampler, interval, straggler_watch(rank, path, environ)),
                              name="slurmtorch-live", daemon=True)
    thread.start()
    atexit.register(_last, sampler, thread)  # a rank that finished says so (exits.finish runs atexit's handlers)
    return thread


def _sample(sampler: Sampler, interval: float, watch: Straggler | None) -> None:
    while not _STOPPED.wait(interval):
        sampler.write()
        said = watch.look() if watch is not None else None
        if said:
            sys.stderr.write(said)
            sys.stderr.flush()


def straggler_watch(rank: int, path: str, environ=os.environ) -> Straggler | None:
    """Rank 0's straggler watch, where the job set a margin > 0."""
    try:
        margin = float(environ.get(protocol.STRAGGLER, ""))
    except ValueError:
        return None
    return Straggler(os.path.dirname(path), margin) if rank == 0 and margin > 0 else None


def _last(sampler: Sampler, thread: threading.Thread) -> None:
    """The last sample, once the thread's own (which writes the same file) is done."""
    _STOPPED.set()
    thread.join(timeout=5)
    sampler.write(ended=True)
