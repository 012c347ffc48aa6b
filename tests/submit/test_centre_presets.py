"""The centres' presets (issue 25): JSC JUWELS Booster, IDRIS Jean Zay, TACC Vista.

Each test names the centre's document in its docstring and reads the lines that document
shows back from the rendered script: the header as sbatch reads it, exports and launch
lines through a real bash. Dry runs through the CLI show the test ground's fixes hold on
each: torchrun's agents get is_host and --local-addr (bootstrap.agent), mpirun binds each
rank to its share of the node.
"""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from slurmtorch import resources
from slurmtorch.bootstrap import agent, rendezvous
from slurmtorch.cli.main import main
from slurmtorch.errors import SpecError
from slurmtorch.submit import sites
from slurmtorch.submit.launch import render
from slurmtorch.submit.launch.spec import build_spec

from test_presets import exported, header, rank_srun
from test_render import golden_options


def rendered(site_name: str, **kw) -> str:
    return render.render_sbatch(build_spec(sites.load_site(site_name), golden_options(site_name, **kw)))


def launch_words(text: str, first: str, **env: str) -> list[str]:
    """The argv of the launch line starting with `first` (srun, "$mpirun"), as bash gives it,
    with `env` set: the line's continuations joined, the command replaced by a printer."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(first + " ") and "rank" in "".join(lines[i:i + 3]))
    block = [lines[start]]
    while block[-1].endswith("\\"):
        block.append(lines[start + len(block)])
    code = "launch() { printf '%s\\0' \"$@\"; }\nmpirun=mpirun\n" + "\n".join(block).replace(first, "launch", 1)
    out = subprocess.run(["bash", "-c", code], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", **env}).stdout
    return out.split("\0")[:-1]


def dry_run(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exc:
        main(["sbatch", "--dry-run", *argv])
    out, err = capsys.readouterr()
    assert exc.value.code in (0, None), err
    return out


# --------------------------------------------------------------------------- JSC


def test_jsc_juwels_booster_follows_jscs_course_scripts():
    """JSC's course (HelmholtzAI-FZJ/2025-12-course-Bringing-Deep-Learning-Workloads-to-JSC-supercomputers,
    code/parallelize/run_ddp_training.sbatch): `#SBATCH --gres=gpu:4`, `--cpus-per-task=48` for the one
    torchrun per node, an --account, and MASTER_ADDR="${MASTER_ADDR}i": the rendezvous on the first
    node's InfiniBand name (SLURMTORCH_FABRIC_HOST_SUFFIX=i). No HCA named: NCCL finds them."""
    text = rendered("jsc-juwels-booster", account="proj0001")
    h = header(text)
    assert (h["gres"], h["cpus-per-task"], h["ntasks-per-node"], h["account"]) == ("gpu:4", "48", "1", "proj0001")
    assert "gpus-per-node" not in h  # one GPU request, JSC's
    env = exported(text, ["SLURMTORCH_FABRIC_HOST_SUFFIX", "NCCL_IB_HCA", "UCX_NET_DEVICES", "NCCL_IB_DISABLE",
                          "NCCL_SOCKET_IFNAME"])
    assert env == {"SLURMTORCH_FABRIC_HOST_SUFFIX": "i", "NCCL_IB_HCA": "<unset>", "UCX_NET_DEVICES": "<unset>",
                   "NCCL_IB_DISABLE": "<unset>", "NCCL_SOCKET_IFNAME": "=ib0"}
    assert "MASTER_ADDR=$(fabric_address nccl) || finish 1" in text  # its fabric name first (rendezvous.sh)
    srun = rendered("jsc-juwels-booster", account="proj0001", launcher="srun")
    assert (header(srun)["ntasks-per-node"], header(srun)["cpus-per-task"], header(srun)["gres"]) == ("4", "12", "gpu:4")
    with pytest.raises(SpecError, match="requires a Slurm account"):
        rendered("jsc-juwels-booster")


def test_the_fabric_address_is_the_nodes_i_name(monkeypatch):
    """MASTER_ADDR and each agent's --local-addr: the address of Slurm's node name + `i`, as JSC's
    scripts resolve "${MASTER_ADDR}i"; before any *_SOCKET_IFNAME."""
    asked: list[str] = []
    monkeypatch.setattr(socket, "gethostbyname", lambda name: asked.append(name) or "10.13.0.7")
    env = {"SLURMTORCH_FABRIC_HOST_SUFFIX": "i", "SLURMD_NODENAME": "jwb0042", "NCCL_SOCKET_IFNAME": "=ib0",
           "SLURM_NODEID": "0"}
    assert rendezvous.site_address(env, "jwb0042.juwels", "nccl") == "10.13.0.7" and asked == ["jwb0042i"]
    assert rendezvous.master_address(env, "jwb0042.juwels", "nccl") == "10.13.0.7"
    assert agent.agent_options(["--nnodes", "2", "-m", "slurmtorch.bootstrap"], env, "10.13.0.7") == [
        "--rdzv-conf", "is_host=1", "--local-addr", "10.13.0.7"]
    without_slurm = {"SLURMTORCH_FABRIC_HOST_SUFFIX": "i"}
    assert rendezvous.site_address(without_slurm, "jwb0042.juwels") == "10.13.0.7" and asked[-1] == "jwb0042i"


def test_an_unresolvable_fabric_name_says_which_setting_to_fix(monkeypatch):
    def fail(name):
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "gethostbyname", fail)
    with pytest.raises(rendezvous.BootstrapError, match="jwb0042i") as exc:
        rendezvous.site_address({"SLURMTORCH_FABRIC_HOST_SUFFIX": "i", "SLURMD_NODENAME": "jwb0042"}, "x")
    assert "fabric_host_suffix" in (exc.value.tip or "")


# --------------------------------------------------------------------------- IDRIS


def test_idris_jean_zay_v100_follows_idris_gpu_pages():
    """IDRIS's GPU partitions (http://www.idris.fr/en/docs/jean-zay/slurm/slurm_partitions_gpu) and its
    multi-GPU sample scripts: gpu_p13 by default with `--gres=gpu:4`, `--hint=nomultithread`, 10 CPUs per
    GPU, the t3 QoS, a 10-minute default; `module purge` and no arch/h100 on the V100 nodes."""
    text = rendered("idris-jean-zay")
    h = header(text)
    assert (h["partition"], h["gres"], h["hint"], h["cpus-per-task"], h["qos"], h["time"]) == (
        "gpu_p13", "gpu:4", "nomultithread", "10", "qos_gpu-t3", "00:10:00")
    assert "module purge" in text and "arch/h100" not in text and "gpus-per-node" not in h


def test_idris_jean_zay_h100_loads_arch_h100_first_and_charges_xyz_at_h100():
    """IDRIS's H100 nodes: `-C h100` (no partition line), `module purge` then `module load arch/h100`
    before any other module, 24 CPUs per GPU, qos_gpu_h100-t3, and hours charged to -A xyz@h100."""
    text = rendered("idris-jean-zay-singularity", partition="gpu_p6", account="abc@h100")
    h = header(text)
    assert "partition" not in h and (h["constraint"], h["gres"], h["cpus-per-task"], h["qos"], h["account"]) == (
        "h100", "gpu:4", "24", "qos_gpu_h100-t3", "abc@h100")
    modules = [ln for ln in text.splitlines() if ln.startswith("module ")]
    assert modules == ["module purge", "module load arch/h100", "module load singularity"]
    with pytest.raises(SpecError, match="NAME@h100") as exc:
        rendered("idris-jean-zay", partition="gpu_p6", account="abc@v100")
    assert exc.value.tip == "pass -A abc@h100"
    assert header(rendered("idris-jean-zay", partition="gpu_p5", account="abc@a100"))["constraint"] == "a100"


def test_idris_singularity_runs_the_image_from_the_allowed_dir():
    """IDRIS's container page: `srun singularity exec --nv $SINGULARITY_ALLOWED_DIR/IMAGE.sif ...`. The
    variable is expanded on the node, the rest stays literal (read back through bash)."""
    text = rendered("idris-jean-zay-singularity")
    argv = launch_words(text, "srun", SINGULARITY_ALLOWED_DIR="/gpfsdsstore/idris/allowed dir")
    start = argv.index("singularity")
    assert argv[start:start + 3] == ["singularity", "exec", "--nv"]
    assert "/gpfsdsstore/idris/allowed dir/pytorch.sif" in argv
    assert argv[argv.index("/gpfsdsstore/idris/allowed dir/pytorch.sif") + 1] == "python3"


def test_a_users_image_path_expands_only_its_variables():
    """--container-image '$SINGULARITY_ALLOWED_DIR/my.sif' as IDRIS users write it: the variable
    expands, blanks and globs stay literal; any other `$` (command substitution) is refused."""
    text = rendered("idris-jean-zay-singularity", container_image="${SINGULARITY_ALLOWED_DIR}/my *.sif")
    assert "/allowed/my *.sif" in launch_words(text, "srun", SINGULARITY_ALLOWED_DIR="/allowed")
    with pytest.raises(SpecError, match="not \\$NAME"):
        rendered("idris-jean-zay-singularity", container_image="$SINGULARITY_ALLOWED_DIR/$(id).sif")


# --------------------------------------------------------------------------- TACC


def test_tacc_vista_follows_taccs_user_guide():
    """TACC's Vista guide (TACC/TACC-Docs docs/hpc/vista/running.md, Table 8; ml.md): `-t` required,
    no GPU request (--gres and --gpus-per-task: "TACC does not support this option"), --mem refused
    with TACC's reason; modules gcc, cuda, python3; ranks under mpirun, one per GH200 node."""
    text = rendered("tacc-vista", time="01:00:00", nodes=2)
    h = header(text)
    assert (h["partition"], h["time"], h["ntasks-per-node"], h["cpus-per-task"]) == ("gh", "01:00:00", "1", "72")
    assert not {"gres", "gpus-per-node", "mem"} & set(h)
    assert [ln for ln in text.splitlines() if ln.startswith("module ")] == [
        "module load gcc", "module load cuda", "module load python3"]
    argv = launch_words(text, '"$mpirun"')
    assert argv[:6] == ["-n", "2", "--map-by", "slot:PE=72:HWTCPUS", "--bind-to", "hwthread"]
    assert exported(text, ["NCCL_IB_HCA", "NCCL_IB_DISABLE"]) == {"NCCL_IB_HCA": "<unset>", "NCCL_IB_DISABLE": "<unset>"}
    with pytest.raises(SpecError, match="requires a time limit"):
        rendered("tacc-vista")
    for kw, option in ((dict(mem="100G"), "--mem"), (dict(gres="gpu:1"), "--gres"),
                       (dict(sbatch_args=("--gpus-per-task=1",)), "--sbatch-arg=--gpus-per-task")):
        with pytest.raises(SpecError, match=f"{option} is refused on partition 'gh': TACC") as exc:
            rendered("tacc-vista", time="10", **kw)
        assert exc.value.tip.startswith("leave --")


# --------------------------------------------------------------------------- the test ground's fixes


@pytest.mark.parametrize("site, extra, per_rank", [
    ("jsc-juwels-booster", ["-A", "proj"], 12),
    ("idris-jean-zay", [], 10),
    ("tacc-vista", ["-t", "30"], 72),
])
def test_dry_runs_keep_the_test_grounds_fixes(capsys, tmp_path, monkeypatch, site, extra, per_rank):
    """torchrun: one agent per node through slurmtorch.bootstrap.agent (is_host, --local-addr on the
    fabric); mpirun: each rank bound to its share of the node (-c CPUs), not to one core."""
    monkeypatch.setenv("SLURMTORCH_HOME", str(tmp_path / "home"))
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    torchrun = dry_run(capsys, "--site", site, "--nodes", "2", "--launcher", "torchrun", *extra, str(script))
    assert "-m slurmtorch.bootstrap.agent --backend nccl --nnodes 2" in torchrun
    assert '--rdzv-endpoint "${MASTER_ADDR:-${nodes[0]}}:$MASTER_PORT"' in torchrun
    mpirun = dry_run(capsys, "--site", site, "--nodes", "2", "--launcher", "mpirun", *extra, str(script))
    assert f"--map-by slot:PE={per_rank}:HWTCPUS --bind-to hwthread" in mpirun


def subset(part, whole) -> bool:
    if isinstance(part, dict):
        return isinstance(whole, dict) and all(k in whole and subset(v, whole[k]) for k, v in part.items())
    return part == whole


def test_the_guides_centre_examples_are_the_presets_own_lines():
    """docs/site-admins.md, "What centres ask for": every YAML block is part of the preset it names."""
    guide = (Path(__file__).resolve().parents[2] / "docs" / "site-admins.md").read_text()
    section = guide.split("## What centres ask for", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```yaml\n# site-configs/([a-z0-9-]+)\.yaml\n(.*?)```", section, re.S)
    assert len(blocks) == len(re.findall("```yaml", section)) >= 5
    for name, block in blocks:
        preset = yaml.safe_load((resources.site_configs_dir() / f"{name}.yaml").read_text())
        assert subset(yaml.safe_load(block), preset), (name, block)


# --------------------------------------------------------------------------- LUMI


def test_lumi_g_follows_lumis_ai_guide():
    """LUMI's AI guide (Lumi-supercomputer/LUMI-AI-Guide, 05-multi-gpu-and-node/run_ddp_srun.sh):
    standard-g, 8 GCDs and 8 ranks of 7 CPUs per node, --mem-per-gpu=60G, the AI Factory modules,
    MIOpen caches in /tmp made on every node, TORCH_HOME=/scratch/${SLURM_JOB_ACCOUNT}/${USER}/torch_home
    expanded when the job runs, the guide's CPU masks, and `singularity run $SIF` with no --rocm."""
    text = rendered("lumi-g", account="project_465000123", nodes=2)
    h = header(text)
    assert (h["partition"], h["gpus-per-node"], h["ntasks-per-node"], h["cpus-per-task"], h["mem-per-gpu"]) == (
        "standard-g", "8", "8", "7", "60G")
    assert [ln for ln in text.splitlines() if ln.startswith("module ")] == [
        "module purge", "module use /appl/local/laifs/modules", "module load lumi-aif-singularity-bindings"]
    env = exported(text, ["TORCH_HOME", "MIOPEN_USER_DB_PATH", "MIOPEN_CUSTOM_CACHE_DIR", "FI_CXI_RDZV_PROTO",
                          "NCCL_NET", "FI_CXI_DISABLE_HOST_REGISTER", "HSA_FORCE_FINE_GRAIN_PCIE", "NCCL_SOCKET_IFNAME"],
                   {"SLURM_JOB_ACCOUNT": "project_465000123", "USER": "ana"})
    # The bindings module and the image give the Slingshot network (the guide's chapter 02): the
    # interface names only, none of the fabric's defaults (fabric_env: interfaces-only).
    assert env == {"TORCH_HOME": "/scratch/project_465000123/ana/torch_home",
                   "MIOPEN_USER_DB_PATH": "/tmp/miopen-config-ana", "MIOPEN_CUSTOM_CACHE_DIR": "/tmp/miopen-cache-ana",
                   "FI_CXI_RDZV_PROTO": "<unset>", "NCCL_NET": "<unset>", "FI_CXI_DISABLE_HOST_REGISTER": "<unset>",
                   "HSA_FORCE_FINE_GRAIN_PCIE": "<unset>", "NCCL_SOCKET_IFNAME": "=hsn0,hsn1,hsn2,hsn3"}
    assert "network" not in h
    assert 'mkdir -p "$TORCH_HOME"' in text and 'mkdir -p "$MIOPEN_CUSTOM_CACHE_DIR" "$MIOPEN_USER_DB_PATH"' in text
    argv = launch_words(text, "srun", SLURMTORCH_CODE="/code")
    assert "--cpu-bind=mask_cpu:0x00fe000000000000,0xfe00000000000000,0x0000000000fe0000,0x00000000fe000000," \
           "0x00000000000000fe,0x000000000000fe00,0x000000fe00000000,0x0000fe0000000000" in argv
    start = argv.index("singularity")
    assert argv[start:start + 2] == ["singularity", "run"] and "--rocm" not in argv
    assert argv[argv.index("python") - 1].endswith(".sif")
    with pytest.raises(SpecError, match="account 'abc' does not have the form"):
        rendered("lumi-g", account="abc")
    assert header(rendered("lumi-g", account="project_1", partition="dev-g", time="03:00:00"))["partition"] == "dev-g"
    with pytest.raises(SpecError, match="a share of the node's CPUs"):
        rendered("lumi-g", account="project_1", launcher="torchrun")
    # run_ddp_torchrun.sh: plain srun, one torchrun per node; the preset takes the masks out.
    torchrun = rendered("lumi-g", account="project_1", preset="torchrun", nodes=2)
    h = header(torchrun)
    assert (h["ntasks-per-node"], h["cpus-per-task"], h["gpus-per-node"]) == ("1", "56", "8")
    assert "--cpu-bind" not in torchrun and build_spec(sites.load_site("lumi-g"), golden_options(
        "lumi-g", account="project_1", preset="torchrun")).launcher == "torchrun"


# --------------------------------------------------------------------------- NERSC


def test_nersc_perlmutter_follows_nerscs_tutorial_and_policy():
    """NERSC's policy page (QOS, -C gpu, no partition) and its DL tutorial's Perlmutter script:
    4 ranks of 32 CPUs per node, plain srun; the `shifter` preset runs nersc/pytorch with
    --module=gpu,nccl-plugin as one option; none of HPE's rendezvous settings."""
    text = rendered("nersc-perlmutter", nodes=2)
    h = header(text)
    assert "partition" not in h and (h["qos"], h["constraint"], h["ntasks-per-node"], h["cpus-per-task"]) == (
        "regular", "gpu", "4", "32")
    assert "network" not in h and "--mpi" not in rank_srun(text)
    env = exported(text, ["NCCL_NET", "FI_CXI_DISABLE_HOST_REGISTER", "NCCL_SOCKET_IFNAME", "FI_CXI_RDZV_PROTO"])
    assert env == {"NCCL_NET": "AWS Libfabric", "FI_CXI_DISABLE_HOST_REGISTER": "1",
                   "NCCL_SOCKET_IFNAME": "=hsn0,hsn1,hsn2,hsn3", "FI_CXI_RDZV_PROTO": "<unset>"}
    shifter = rendered("nersc-perlmutter", preset="shifter", nodes=2)
    # The nccl-plugin module's network settings, not the fabric's: the interface names only.
    assert exported(shifter, ["NCCL_NET", "FI_CXI_DISABLE_HOST_REGISTER", "NCCL_SOCKET_IFNAME"]) == {
        "NCCL_NET": "<unset>", "FI_CXI_DISABLE_HOST_REGISTER": "<unset>", "NCCL_SOCKET_IFNAME": "=hsn0,hsn1,hsn2,hsn3"}
    argv = launch_words(shifter, "srun", SLURMTORCH_CODE="/code")
    start = argv.index("shifter")
    assert argv[start + 1] == "--image=nersc/pytorch:24.06.02"
    assert "--module=gpu,nccl-plugin" in argv[start:argv.index("python")]
    assert header(rendered("nersc-perlmutter", partition="debug"))["qos"] == "debug"


# --------------------------------------------------------------------------- CINECA


def test_cineca_leonardo_booster_has_a_qos_per_kind_of_job_on_one_partition():
    """CINECA's Leonardo page: the Booster's boost_usr_prod with QOS normal, boost_qos_dbg and
    boost_qos_lprod, each with its own limits, checked before sbatch; an account on every job."""
    h = header(rendered("cineca-leonardo-booster", account="EUHPC_A01_001"))
    assert (h["partition"], h["qos"], h["gpus-per-node"], h["cpus-per-task"]) == ("boost_usr_prod", "normal", "4", "8")
    dbg = header(rendered("cineca-leonardo-booster", account="p", qos="boost_qos_dbg", time="00:30:00", nodes=2))
    assert (dbg["partition"], dbg["qos"]) == ("boost_usr_prod", "boost_qos_dbg")
    with pytest.raises(SpecError, match="00:30:00"):
        rendered("cineca-leonardo-booster", account="p", qos="boost_qos_dbg", time="01:00:00")
    lprod = header(rendered("cineca-leonardo-booster", account="p", partition="boost_qos_lprod", time="4-00:00:00"))
    assert (lprod["partition"], lprod["qos"], lprod["time"]) == ("boost_usr_prod", "boost_qos_lprod", "4-00:00:00")
    with pytest.raises(SpecError, match="requires a Slurm account"):
        rendered("cineca-leonardo-booster")
