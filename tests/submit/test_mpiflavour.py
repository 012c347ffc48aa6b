"""`slurmtorch mpirun` with a site's MPI launcher (`mpirun: flavour:`): Cray PALS on ALCF Polaris
rendered as ALCF documents it, each MPI's spelling of ranks per node and binding, the GPU
order, and a real 4-rank run of the README's example under MPICH's Hydra mpiexec.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import MPICH
from slurmtorch import protocol
from slurmtorch.bootstrap.device import pick_device
from slurmtorch.errors import SiteError, SpecError
from slurmtorch.submit import sites
from slurmtorch.submit.launch import launchplan, render
from slurmtorch.submit.launch.mpiflavour import mpiexec_line
from slurmtorch.options import Options
from slurmtorch.submit.sites.model import MpiLaunch
from slurmtorch.submit.launch.spec import build_spec

REPO = Path(__file__).resolve().parents[2]
HYDRA_SITE = REPO / "tests" / "sites" / "hydra-local.yaml"
TRAIN = REPO / "examples" / "train_ddp.py"


def cli(*argv, env=None, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurmtorch", *map(str, argv)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def test_polaris_dry_run_writes_pals_mpiexec_as_alcf_documents_it(tmp_path):
    hosts = tmp_path / "nodefile"
    hosts.write_text("x3001c0s13b0n0\nx3001c0s13b1n0\n")
    result = cli("mpirun", "--site", "alcf-polaris", "--hostfile", hosts, "-n", "8", "--dry-run", TRAIN)
    assert result.returncode == 0, result.stderr
    launch = next(line for line in result.stdout.splitlines() if line.startswith('"$mpiexec"'))
    argv = shlex.split(launch.rstrip("\\"))
    assert argv[1:10] == ["-n", "8", "--ppn", "4", "--depth", "16", "--cpu-bind", "depth", "--hostfile"]
    assert argv[10] == str(hosts) and argv[11] == "--env"
    assert "--bind-to" not in argv and "-x" not in argv  # nothing of Open MPI's
    assert "export SLURMTORCH_GPU_ORDER=reverse" in result.stdout  # set_affinity_gpu_polaris.sh's order
    assert "mpiexec=mpiexec" in result.stdout  # Cray's, on PATH: never a wheel's beside python


def test_pals_env_options_read_back_through_bash_as_the_script_exported_them(tmp_path):
    """`--env NAME="$NAME"`: each value as the script exported it, a composed path included."""
    spec = build_spec(sites.load_site("alcf-polaris"), Options(
        kind="mpirun", script="/home/user/train.py", python="/opt/venv/bin/python", ntasks=4,
        job_root=str(tmp_path), env=("NOTE=a b'c $HOME",)))
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "mpiexec").write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    (fake / "mpiexec").chmod(0o755)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "LD_LIBRARY_PATH": "/old"}
    out = subprocess.run(["bash", "-c", render.render_mpirun(spec)], env=env, capture_output=True, text=True,
                         timeout=30).stdout.splitlines()
    passed = [out[i + 1] for i, a in enumerate(out) if a == "--env"]
    assert "NOTE=a b'c $HOME" in passed and "SLURMTORCH_GPU_ORDER=reverse" in passed
    assert ("LD_LIBRARY_PATH=/soft/libraries/aws-ofi-nccl/v1.9.1-aws/lib:/soft/libraries/hwloc/lib:/old"
            in passed)


@pytest.mark.parametrize("flavour, bind, depth, expected", [
    ("pals", "depth", 16, ["--ppn", "4", "--depth", "16", "--cpu-bind", "depth"]),
    ("pals", "none", None, ["--ppn", "4", "--cpu-bind", "none"]),
    ("hydra", "depth", 16, ["-ppn", "4", "-bind-to", "core:16"]),
    ("hydra", "core", None, ["-ppn", "4", "-bind-to", "core"]),
    ("intel", "depth", 16, ["-ppn", "4", "-genv", "I_MPI_PIN_DOMAIN", "16"]),
    ("intel", "none", None, ["-ppn", "4", "-genv", "I_MPI_PIN", "0"]),
    ("openmpi", "depth", 16, ["--map-by", "ppr:4:node:PE=16", "--bind-to", "core"]),
    ("openmpi", "none", None, ["--map-by", "ppr:4:node", "--bind-to", "none"]),
])
def test_each_mpi_spells_ranks_per_node_and_binding_its_own_way(flavour, bind, depth, expected):
    line = mpiexec_line(MpiLaunch(flavour=flavour, ranks_per_node=4, cpu_bind=bind, depth=depth), 8, "hosts", [])
    args = list(line.args)
    assert args[:2] == ["-n", "8"]
    assert any(args[i:i + len(expected)] == expected for i in range(len(args))), args


@pytest.mark.parametrize("flavour, hostfile", [("openmpi", "--hostfile"), ("hydra", "-f"), ("pals", "--hostfile"),
                                               ("intel", "-f")])
def test_each_mpi_gets_the_hostfile_by_its_own_option(flavour, hostfile):
    args = list(mpiexec_line(MpiLaunch(flavour=flavour), 2, "/h", ["A"]).args)
    assert args[args.index(hostfile) + 1] == "/h"


def test_a_batch_job_on_a_site_with_another_mpi_is_refused_with_the_way_out():
    site = sites.load_site(str(HYDRA_SITE))
    with pytest.raises(SpecError) as exc:
        build_spec(site, Options(script="/home/user/train.py", python="/opt/venv/bin/python", job_root="/j"))
    assert "hydra's mpiexec" in exc.value.message and "--launcher srun" in (exc.value.tip or "")


# --------------------------------------------------------------------------- TACC's ibrun

VISTA_MPIRUN = dict(kind="mpirun", script="/home/user/train.py", python="/opt/venv/bin/python", ntasks=4, job_root="/j")


def test_ibrun_starts_the_ranks_in_the_slurm_job_it_runs_in_as_tacc_documents_it():
    """TACC's Vista guide (docs/hpc/vista/launching.md, vista.md in TACC/TACC-Docs): `ibrun`, "a
    Vista-aware replacement for generic MPI launchers", takes the nodes and ranks from the Slurm job
    (or idev session) it runs in and places them itself; `-np N` runs N of them (vista.md's
    `ibrun -np $SLURM_NNODES ...`); the variables exported before it reach the ranks."""
    line = mpiexec_line(MpiLaunch(flavour="ibrun"), 4, None, ["A", "B"])
    assert (line.program, line.beside_python, line.args) == ("ibrun", False, ("-np", "4"))
    text = render.render_mpirun(build_spec(sites.load_site("tacc-vista"), Options(**VISTA_MPIRUN)))
    assert '"$ibrun" -np 4 \\' in text and "ibrun=ibrun" in text and "module load gcc" in text


def test_ibrun_takes_no_hostfile_nor_a_placement_of_the_sites(tmp_path):
    with pytest.raises(SpecError) as exc:
        build_spec(sites.load_site("tacc-vista"), Options(**VISTA_MPIRUN, hostfile="/home/user/hosts"))
    assert exc.value.message == ("--hostfile: ibrun takes the hosts from the Slurm job it runs in (TACC); it "
                                 "reads no hostfile")
    site = tmp_path / "ib.yaml"
    site.write_text("mpirun: {flavour: ibrun, ranks_per_node: 4, cpu_bind: core}\n"
                    "node_types: {gh: {gpus: 1, cpus: 72, fabric: infiniband}}\n"
                    "partitions: {gh: {max_nodes: 2, max_time: '1:00:00', node_type: gh}}\n")
    with pytest.raises(SiteError) as err:
        sites.load_site(site)
    assert [m.split(": ", 1)[1] for m, _ in err.value.problems] == [
        "mpirun.ranks_per_node: ibrun places the ranks itself, from the Slurm job's own layout",
        "mpirun.cpu_bind: ibrun places the ranks itself, from the Slurm job's own layout"]


def test_a_batch_job_on_vista_keeps_open_mpis_mpirun_as_taccs_ml_guide_runs_pytorch():
    site = sites.load_site("tacc-vista")
    assert site.mpirun.flavour == "ibrun"
    spec = build_spec(site, Options(script="/home/user/train.py", python="/opt/venv/bin/python", job_root="/j",
                                    time="01:00:00"))
    assert spec.launcher == "mpirun" and launchplan.plan(spec).mpirun == "mpirun"


def test_ibrun_outside_a_slurm_job_is_one_line_before_anything_starts():
    from slurmtorch.errors import SubmitError
    from slurmtorch.usecases.launch import check_launcher

    spec = build_spec(sites.load_site("tacc-vista"), Options(**VISTA_MPIRUN))
    with pytest.raises(SubmitError) as exc:
        check_launcher(spec, {"PATH": "/usr/bin"})
    assert exc.value.message == "ibrun starts ranks inside a Slurm job, and this shell is in none"
    check_launcher(spec, {"PATH": "/usr/bin", "SLURM_JOB_ID": "7"})  # in an idev session: ibrun's to place


def test_gpu_order_is_exported_only_for_slurmtorch_mpirun_and_only_where_the_site_reverses_it():
    polaris, local = sites.load_site("alcf-polaris"), sites.load_site("local")
    opts = dict(script="/home/user/train.py", python="/opt/venv/bin/python", ntasks=4, job_root="/j")
    assert dict(build_spec(polaris, Options(kind="mpirun", **opts)).env)[protocol.GPU_ORDER] == "reverse"
    assert protocol.GPU_ORDER not in dict(build_spec(local, Options(kind="mpirun", **opts)).env)


@pytest.mark.parametrize("local_rank, natural, reverse", [(0, 0, 3), (1, 1, 2), (3, 3, 0)])
def test_reverse_gpu_order_gives_local_rank_i_the_nodes_gpu_n_minus_1_minus_i(local_rank, natural, reverse):
    assert pick_device(local_rank, 4, 4) == natural
    assert pick_device(local_rank, 4, 4, order="reverse") == reverse
    assert pick_device(0, 4, 1, bound=True, order="reverse") == 0  # one GPU bound to the rank: that one


def test_hydra_site_runs_the_readme_example_on_4_ranks_with_mpichs_mpiexec(mpich_env, tmp_path):
    """The real thing: `slurmtorch mpirun --site <hydra site> -n 4 examples/train_ddp.py` under MPICH's
    own mpiexec (.venv-mpich), no Slurm: the ranks meet through MPICH and train with gloo."""
    hosts = tmp_path / "hosts"  # as $PBS_NODEFILE would name them: Hydra forks on its own host
    hosts.write_text("localhost\n")
    result = hydra_run(mpich_env, tmp_path, "--hostfile", hosts, "-n", "4", TRAIN, "--epochs", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "trained on 4 ranks across nodes" in result.stdout, result.stdout + result.stderr
    script = (tmp_path / "local" / "1" / protocol.SCRIPT).read_text()
    assert f'"$mpiexec" -n 4 -ppn 4 -bind-to core -f {hosts} -genvall' in script
    assert f"python={MPICH / 'python'}\n" in script  # the mpich wheel's mpiexec, beside the ranks' python
    assert 'mpiexec="${python%/*}/mpiexec"\n' in script


def test_a_rank_that_raises_under_hydra_ends_the_run_and_is_named(mpich_env, tmp_path):
    """The guard ends Hydra's launch as it ends Open MPI's: the run exits non-zero, naming the rank."""
    failing = tmp_path / "fail.py"
    failing.write_text("import os, time\n"
                       "if os.environ['RANK'] == '1':\n    raise ValueError('bad batch on rank 1')\n"
                       "time.sleep(120)\n")
    shm = Path("/dev/shm")
    before = set(shm.glob("mpich_shm_*"))
    try:
        result = hydra_run(mpich_env, tmp_path, "-n", "2", failing, timeout=120)
    finally:  # MPI_Abort leaves MPICH's shared-memory segment behind: ours to remove
        for leftover in set(shm.glob("mpich_shm_*")) - before:
            leftover.unlink(missing_ok=True)
    assert result.returncode != 0
    assert "rank 1 on " in result.stderr and "ValueError: bad batch on rank 1" in result.stderr, result.stderr


def hydra_run(mpich_env, home: Path, *argv, timeout=300) -> subprocess.CompletedProcess:
    """`slurmtorch mpirun --site <hydra site> ARGV` run by MPICH's venv's python (its mpi4py is MPICH's)."""
    return subprocess.run([str(MPICH / "python"), "-m", "slurmtorch", "mpirun", "--site", str(HYDRA_SITE),
                           *map(str, argv)], env={**mpich_env, "SLURMTORCH_HOME": str(home)}, cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)
