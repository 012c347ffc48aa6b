"""The bundled vendor presets: each renders what its public document says.

One test per preset, its document in the docstring: the variables that document names
appear in the rendered batch script with the documented values, read back through a real
bash (so quoting and path composition count, not only the text).
"""

from __future__ import annotations

import os
import subprocess
import tomllib

import pytest

from slurmtorch.cli.main import main
from slurmtorch.submit.launch import render
from slurmtorch.submit import sites
from slurmtorch.submit.launch.spec import build_spec

from test_render import golden_options


def rendered(site_name: str, **kw) -> str:
    site = sites.load_site(site_name)
    account = "proj0001" if site.required else None
    return render.render_sbatch(build_spec(site, golden_options(site_name, account=account, **kw)))


def exported(text: str, names: list[str], before: dict[str, str] | None = None) -> dict[str, str]:
    """The values the script's export lines give `names` in bash, on top of `before`."""
    exports = "\n".join(ln for ln in text.splitlines() if ln.startswith("export "))
    env = {k: v for k, v in os.environ.items() if k not in names}
    env.update(before or {})
    code = exports + "\n" + "".join(f"printf '%s=%s\\0' {n} \"${{{n}-<unset>}}\"\n" for n in names)
    out = subprocess.run(["bash", "-c", code], capture_output=True, check=True, text=True, env=env).stdout
    return dict(item.split("=", 1) for item in out.split("\0")[:-1])


def header(text: str) -> dict[str, str]:
    return dict((ln[len("#SBATCH --"):].split("=", 1) + ["<flag>"])[:2] for ln in text.splitlines()
                if ln.startswith("#SBATCH --"))


def rank_srun(text: str) -> str:
    return next(ln for ln in text.splitlines() if ln.startswith("srun --nodes=") and "rank-%t" in ln)


HPE_CCL = {"FI_CXI_DISABLE_HOST_REGISTER": "1", "FI_CXI_DEFAULT_CQ_SIZE": "131072", "NCCL_CROSS_NIC": "1",
           "NCCL_NET_GDR_LEVEL": "PHB"}


# What HPE's current Slingshot guide for NCCL (its "Essential Libfabric Environment Settings" and
# "Environment Settings for NCCL" tables,
# https://github.com/HewlettPackard/shs-ccl-docs/blob/main/nccl/nccl_tuning_guide.md) shares with
# NERSC's env_nccl.sh and CSCS's nccl_env_vars: the fabric's defaults (edition 3, issue 34).
SHARED = {**HPE_CCL, "FI_MR_CACHE_MONITOR": "userfaultfd", "NCCL_NET": "AWS Libfabric"}
# HPE's alone: the alt_read rendezvous (with --network=disable_rdzv_get), hybrid matching, its queue.
HPE_ONLY = ["FI_CXI_RDZV_PROTO", "FI_CXI_RX_MATCH_MODE", "FI_CXI_RDZV_EAGER_SIZE", "FI_CXI_RDZV_GET_MIN",
            "FI_CXI_DEFAULT_TX_SIZE"]


def test_slingshot_nvidia_follows_hpe_and_nersc():
    """What HPE's current guide and NERSC's for the nccl-ofi plugin
    (https://github.com/NERSC/nccl-ofi-plugin/blob/main/env_nccl.sh) both set (SHARED), and none of
    HPE's rendezvous settings, which NERSC does not set (no #SBATCH --network): NCCL_NET="AWS
    Libfabric" so that NCCL stops instead of falling back to TCP sockets when the plugin is missing
    (left out on one node, as HPE's ccl_env.sh warns), NCCL on the hsn interfaces, the plugin's host
    folder before LD_LIBRARY_PATH, and not `.../plugin/deps/lib`: the `deps/lib` of NERSC's podman-hpc
    nccl module (https://github.com/NERSC/podman-hpc/blob/main/etc/modules.d/nccl.yaml) is a folder
    inside the container. Jobs are QOS-routed with -q and -C gpu and charged with -A
    (https://docs.nersc.gov/jobs/policy/): no #SBATCH --partition."""
    text = rendered("slingshot-nvidia", nodes=2)
    env = exported(text, [*SHARED, *HPE_ONLY, "NCCL_SOCKET_IFNAME", "LD_LIBRARY_PATH"], {"LD_LIBRARY_PATH": "/usr/lib64"})
    assert {k: env[k] for k in SHARED} == SHARED
    assert {env[k] for k in HPE_ONLY} == {"<unset>"}
    assert env["NCCL_SOCKET_IFNAME"] == "=hsn0,hsn1,hsn2,hsn3"  # NERSC's `hsn` prefix, exactly
    assert env["LD_LIBRARY_PATH"] == "/global/common/software/nersc9/nccl/2.19/plugin/lib:/usr/lib64"
    h = header(text)
    assert "partition" not in h and (h["qos"], h["constraint"], h["account"]) == ("regular", "gpu", "proj0001")
    assert "network" not in h
    assert "--mpi=cray_shasta" in rank_srun(text)
    assert exported(rendered("slingshot-nvidia"), ["NCCL_NET"])["NCCL_NET"] == "<unset>"  # one node
    assert header(rendered("slingshot-nvidia", partition="regular-80g"))["constraint"] == "'gpu&hbm80g'"  # sbatch reads the quotes
    assert header(rendered("slingshot-nvidia", partition="debug"))["qos"] == "debug"


def test_mi250x_follows_olcfs_frontier_pytorch_guide():
    """OLCF's PyTorch on Frontier guide (https://docs.olcf.ornl.gov/software/analytics/pytorch_frontier.html):
    `srun -c7 --gpus-per-task=1 --gpu-bind=closest`, #SBATCH --network=disable_rdzv_get, and the RCCL
    environment it lists: NCCL_CROSS_NIC=1, NCCL_NET_GDR_LEVEL=PHB, NCCL_SOCKET_IFNAME=hsn0,hsn1,hsn2,hsn3,
    HSA_FORCE_FINE_GRAIN_PCIE=1, FI_MR_CACHE_MONITOR=kdreg2, FI_CXI_DISABLE_HOST_REGISTER=1,
    FI_CXI_DEFAULT_CQ_SIZE=131072, FI_CXI_RDZV_PROTO=alt_read, FI_CXI_RDZV_EAGER_SIZE=0,
    FI_CXI_RDZV_THRESHOLD=0, FI_CXI_RDZV_GET_MIN=0, FI_CXI_DEFAULT_TX_SIZE=2048, FI_CXI_RX_MATCH_MODE=hybrid;
    8 GCDs and 56 usable cores per node (https://docs.olcf.ornl.gov/systems/frontier_user_guide.html)."""
    documented = {**HPE_CCL, "HSA_FORCE_FINE_GRAIN_PCIE": "1", "FI_MR_CACHE_MONITOR": "kdreg2",
                  "FI_CXI_RDZV_PROTO": "alt_read", "FI_CXI_RDZV_EAGER_SIZE": "0", "FI_CXI_RDZV_THRESHOLD": "0",
                  "FI_CXI_RDZV_GET_MIN": "0", "FI_CXI_DEFAULT_TX_SIZE": "2048", "FI_CXI_RX_MATCH_MODE": "hybrid"}
    text = rendered("mi250x")
    env = exported(text, [*documented, "NCCL_SOCKET_IFNAME"])
    assert {k: env[k] for k in documented} == documented
    assert env["NCCL_SOCKET_IFNAME"] == "=hsn0,hsn1,hsn2,hsn3"
    h = header(text)
    assert (h["network"], h["gpus-per-node"], h["ntasks-per-node"], h["cpus-per-task"]) == (
        "disable_rdzv_get", "8", "8", "7")
    srun = rank_srun(text)
    assert "--cpus-per-task=7" in srun and srun.index("--gpus-per-task=1") < srun.index("--gpu-bind=closest")
    assert "module load rccl-net-plugin" in text and 'mkdir -p "$MIOPEN_USER_DB_PATH"' in text
    assert header(rendered("mi250x", preset="debug"))["qos"] == "debug"


# CSCS's NCCL variables for uenv jobs (docs/software/communication/nccl_env_vars in
# https://github.com/eth-cscs/cscs-docs): "should always be set for correctness and optimal
# performance when using NCCL with uenv".
CSCS_NCCL = {"NCCL_NET": "AWS Libfabric", "NCCL_NET_GDR_LEVEL": "PHB", "NCCL_CROSS_NIC": "1",
             "NCCL_PROTO": "^LL128", "FI_CXI_DEFAULT_CQ_SIZE": "131072", "FI_CXI_DEFAULT_TX_SIZE": "32768",
             "FI_CXI_DISABLE_HOST_REGISTER": "1", "FI_CXI_RX_MATCH_MODE": "software",
             "FI_MR_CACHE_MONITOR": "userfaultfd"}
# pytorch.md's uenv sbatch script, besides the NCCL variables.
CSCS_UENV = {"OMP_NUM_THREADS": "8", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "TRITON_HOME": "/dev/shm/",
             "MPICH_GPU_SUPPORT_ENABLED": "0", "CUDA_CACHE_DISABLE": "1"}


def launch_argv(text: str, job_dir: str) -> list[str]:
    """The rank launch (srun ... through the end of its continuation lines) as bash reads it,
    with SLURMTORCH_JOB_DIR set: every word, quotes and expansions applied."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("srun --nodes="))
    end = start
    while lines[end].endswith("\\"):
        end += 1
    code = "set -- " + "\n".join(lines[start:end + 1])[len("srun "):] + "\nprintf '%s\\0' \"$@\"\n"
    env = {"PATH": os.environ["PATH"], "SLURMTORCH_JOB_DIR": job_dir, "MASTER_ADDR": "a", "MASTER_PORT": "1",
           "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "nid[1-2]"}
    out = subprocess.run(["bash", "-c", code], capture_output=True, check=True, text=True, env=env).stdout
    return out.split("\0")[:-1]


def written_edf(text: str, job_dir) -> dict:
    """The EDF the batch script writes, by running its own lines in bash, parsed as TOML."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith('cat >"$SLURMTORCH_JOB_DIR/'))
    end = lines.index("SLURMTORCH_EDF", start)
    subprocess.run(["bash", "-c", "\n".join(lines[start:end + 1])], check=True,
                   env={"PATH": os.environ["PATH"], "SLURMTORCH_JOB_DIR": str(job_dir)})
    return tomllib.loads((job_dir / "environment.toml").read_text())


def test_cscs_alps_uenv_follows_cscs_pytorch_guide():
    """CSCS's "Running PyTorch jobs with Slurm" with the PyTorch uenv (docs/software/ml/pytorch.md in
    https://github.com/eth-cscs/cscs-docs): `#SBATCH --uenv=pytorch/v2.8.0:/user-environment`,
    `#SBATCH --view=default`, OMP_NUM_THREADS=8 (our default would be the rank's 72 cores),
    TORCH_NCCL_ASYNC_ERROR_HANDLING=1, TRITON_HOME=/dev/shm/, MPICH_GPU_SUPPORT_ENABLED=0,
    CUDA_CACHE_DISABLE=1, the NCCL variables (CSCS_NCCL) and plain `srun -ul` (no --mpi). Where
    HPE's guide differs, CSCS's page wins: no alt_read rendezvous variables and so no
    --network=disable_rdzv_get; NCCL_NET on one node too ("always")."""
    for nodes in (1, 2):
        text = rendered("cscs-alps", nodes=nodes)
        names = [*CSCS_NCCL, *CSCS_UENV, "FI_CXI_RDZV_PROTO", "FI_CXI_RDZV_EAGER_SIZE", "FI_CXI_RDZV_GET_MIN"]
        env = exported(text, names)
        assert {k: env[k] for k in CSCS_NCCL} == CSCS_NCCL
        assert {k: env[k] for k in CSCS_UENV} == CSCS_UENV
        assert {env[k] for k in names[-3:]} == {"<unset>"}
        h = header(text)
        assert (h["uenv"], h["view"], h["ntasks-per-node"], h["gpus-per-node"]) == (
            "pytorch/v2.8.0:/user-environment", "default", "4", "4")
        assert "network" not in h
        srun = rank_srun(text)
        assert "--mpi" not in srun and "--environment" not in srun
    assert rendered("cscs-alps") == rendered("cscs-alps", preset="uenv").replace("preset uenv", "preset default")


def test_cscs_alps_container_engine_follows_alps_extended_images(tmp_path):
    """CSCS's Alps Extended Images with the Container Engine (docs/software/alps-extended-images.md,
    docs/software/container-engine/edf.md in https://github.com/eth-cscs/cscs-docs): an EDF with the
    image, mounts, `entrypoint = true`, `writable = true`, PMIX_MCA_psec = "native" and
    `com.hooks.cxi.enabled = "false"`; `srun --mpi=pmix --network=disable_rdzv_get --environment=EDF`.
    slurmtorch writes the EDF into the job folder, mounts the job folder and the script's folder,
    and runs the image's python3. The job's environment goes into the EDF (the image's values win
    over the host's otherwise), less the network variables the image sets itself."""
    text = rendered("cscs-alps", preset="ce", nodes=2)
    edf = written_edf(text, tmp_path)
    assert edf["image"] == "jfrog.svc.cscs.ch/docker-group-csstaff/alps-images/ngc-pytorch:26.02-py3-alps6"
    # The script's folder (/home/user) holds the job folder (/home/user/.slurmtorch/jobs): one mount.
    assert edf["mounts"] == ["/home/user:/home/user", "/capstor", "/iopsstor"]
    assert (edf["entrypoint"], edf["writable"]) == (True, True)
    assert edf["annotations"] == {"com": {"hooks": {"cxi": {"enabled": "false"}}}}
    assert edf["env"]["PMIX_MCA_psec"] == "native" and edf["env"]["OMP_NUM_THREADS"] == "8"
    assert edf["env"]["NCCL_SOCKET_IFNAME"] == "=hsn0,hsn1,hsn2,hsn3"
    assert not {"NCCL_NET", "FI_CXI_RX_MATCH_MODE", "FI_CXI_DEFAULT_TX_SIZE", "TRITON_HOME"} & set(edf["env"])
    # None of the fabric's defaults either (fabric_env: interfaces-only): the image's are its own.
    assert [k for k in edf["env"] if k.startswith(("FI_", "NCCL_"))] == ["NCCL_SOCKET_IFNAME"]
    assert edf["env"] == {k: v for k, v in exported(text, list(edf["env"])).items()}  # the host's exports too
    argv = launch_argv(text, "/jobs/7")
    assert argv[argv.index("--kill-on-bad-exit=1") + 1] == "--mpi=pmix"
    assert "--network=disable_rdzv_get" in argv and "--environment=/jobs/7/environment.toml" in argv
    assert argv[argv.index("--environment=/jobs/7/environment.toml") + 1:][:3] == [
        "python3", "-m", "slurmtorch.bootstrap"]
    assert "network" not in header(text)  # CSCS asks for it on srun (and the image sets alt_read itself)


def test_azure_ndv5_follows_the_azure_hpc_image_and_azures_slurm_examples():
    """The Azure HPC image's /etc/nccl.conf for ND H100 v5
    (https://github.com/Azure/azhpc-images/blob/master/components/customizations/ndv5.sh):
    NCCL_TOPO_FILE=/opt/microsoft/ndv5-topo.xml (the file the image ships; its ndv5/topo.xml is a link
    to it), NCCL_IB_PCI_RELAXED_ORDERING=1, NCCL_IGNORE_CPU_AFFINITY=1; its IB device names mlx5_ib0..7
    (https://github.com/Azure/azhpc-images/blob/master/components/install_azure_persistent_rdma_naming.sh);
    and Azure's Slurm example (https://github.com/Azure/ai-infrastructure-on-azure/blob/main/examples/megatron-lm/GPT3-175B/slurm/04-gpt175B.sh):
    CUDA_DEVICE_ORDER=PCI_BUS_ID, UCX_TLS=rc, NCCL_SOCKET_IFNAME=eth0, UCX_NET_DEVICES=mlx5_ib0:1."""
    documented = {"NCCL_TOPO_FILE": "/opt/microsoft/ndv5-topo.xml", "NCCL_IB_PCI_RELAXED_ORDERING": "1",
                  "NCCL_IGNORE_CPU_AFFINITY": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "UCX_TLS": "rc"}
    env = exported(rendered("azure-ndv5"), [*documented, "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "UCX_NET_DEVICES",
                                            "NCCL_IB_DISABLE"])
    assert {k: env[k] for k in documented} == documented
    assert env["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_ib{i}" for i in range(8))  # not the mlx5_an* Ethernet ones
    assert env["NCCL_SOCKET_IFNAME"] == "=eth0" and env["UCX_NET_DEVICES"].startswith("mlx5_ib0:1,")
    assert env["NCCL_IB_DISABLE"] == "<unset>"


def test_aws_p5_follows_the_efa_nccl_guide():
    """AWS's "Get started with EFA and NCCL" (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start-nccl.html):
    FI_EFA_USE_DEVICE_RDMA=1, and /opt/amazon/efa/lib and /opt/amazon/ofi-nccl/lib before the existing
    LD_LIBRARY_PATH; FI_PROVIDER=efa as aws-ofi-nccl's table allows
    (https://github.com/aws/aws-ofi-nccl/blob/master/doc/efa-env-var.md); NCCL_SOCKET_IFNAME=^docker,lo,veth
    as AWS's Slurm NCCL test sets it (https://github.com/aws-samples/awsome-distributed-training/blob/main/micro-benchmarks/nccl-tests/slurm/nccl-tests-ami.sbatch)."""
    text = rendered("aws-p5")
    names = ["FI_EFA_USE_DEVICE_RDMA", "FI_PROVIDER", "LD_LIBRARY_PATH", "NCCL_SOCKET_IFNAME", "NCCL_PROTO"]
    env = exported(text, names, {"LD_LIBRARY_PATH": "/usr/local/cuda/lib64"})
    assert (env["FI_EFA_USE_DEVICE_RDMA"], env["FI_PROVIDER"]) == ("1", "efa")
    assert env["LD_LIBRARY_PATH"] == "/opt/amazon/efa/lib:/opt/amazon/ofi-nccl/lib:/usr/local/cuda/lib64"
    assert exported(text, ["LD_LIBRARY_PATH"])["LD_LIBRARY_PATH"] == "/opt/amazon/efa/lib:/opt/amazon/ofi-nccl/lib"
    assert env["NCCL_SOCKET_IFNAME"] == "^docker,lo,veth"
    assert env["NCCL_PROTO"] == "<unset>"  # the old NCCL_PROTO=simple advice is obsolete (same table)


@pytest.mark.parametrize("partition, tuner", [("a3ultra", "tuner_config_a3u.txtpb"), ("a4high", "tuner_config.txtpb")])
def test_gcp_a3u_a4_follows_googles_cluster_toolkit(partition, tuner):
    """The gIB settings Google's Cluster Toolkit lists as /usr/local/gib/scripts/set_nccl_env.sh's
    (https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/main/examples/machine-learning/a3-ultragpu-8g/nemo-framework/Dockerfile):
    NCCL_NET=gIB, NCCL_CROSS_NIC=0, NCCL_NET_GDR_LEVEL=PIX, NCCL_P2P_NET_CHUNKSIZE=131072,
    NCCL_NVLS_CHUNKSIZE=524288, NCCL_IB_ADAPTIVE_ROUTING=1, NCCL_IB_QPS_PER_CONNECTION=4, NCCL_IB_TC=52,
    NCCL_IB_FIFO_TC=84, the tuner file, LD_LIBRARY_PATH=/usr/local/gib/lib64:$LD_LIBRARY_PATH,
    GLOO_SOCKET_IFNAME=enp0s19,enp192s20; the A4 VM blueprint's NCCL_IB_GID_INDEX=3
    (https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/main/examples/machine-learning/a4-highgpu-8g/a4high-vm.yaml)."""
    documented = {"NCCL_NET": "gIB", "NCCL_CROSS_NIC": "0", "NCCL_NET_GDR_LEVEL": "PIX",
                  "NCCL_P2P_NET_CHUNKSIZE": "131072", "NCCL_NVLS_CHUNKSIZE": "524288", "NCCL_IB_ADAPTIVE_ROUTING": "1",
                  "NCCL_IB_QPS_PER_CONNECTION": "4", "NCCL_IB_TC": "52", "NCCL_IB_FIFO_TC": "84",
                  "NCCL_TUNER_CONFIG_PATH": f"/usr/local/gib/configs/{tuner}", "GLOO_SOCKET_IFNAME": "enp0s19,enp192s20"}
    text = rendered("gcp-a3u-a4", partition=partition)
    env = exported(text, [*documented, "LD_LIBRARY_PATH", "NCCL_SOCKET_IFNAME", "NCCL_IB_GID_INDEX"],
                   {"LD_LIBRARY_PATH": "/usr/lib/x86_64-linux-gnu"})
    assert {k: env[k] for k in documented} == documented
    assert env["LD_LIBRARY_PATH"] == "/usr/local/gib/lib64:/usr/lib/x86_64-linux-gnu"
    assert env["NCCL_SOCKET_IFNAME"] == "=enp0s19,enp192s20"
    assert env["NCCL_IB_GID_INDEX"] == ("3" if partition == "a4high" else "<unset>")
    assert header(text)["partition"] == partition


@pytest.mark.parametrize("preset", ["uenv", "ce"])
def test_cscs_alps_dry_runs_keep_the_test_grounds_fixes(capsys, monkeypatch, tmp_path, preset):
    """`slurmtorch sbatch --dry-run --launcher torchrun|mpirun` on cscs-alps: torchrun's agent on the
    site's interface with the rendezvous on the first node's fabric address, mpirun binding each rank
    to its cores, and (Container Engine) MASTER_ADDR found in bash and the job's environment in the EDF."""
    monkeypatch.setenv("SLURMTORCH_HOME", str(tmp_path / "home"))
    script = tmp_path / "train.py"
    script.write_text("pass\n")

    def dry_run(launcher: str) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as e:
            main(["sbatch", "--site", "cscs-alps", "--preset", preset, "--nodes", "2", "--launcher", launcher,
                  "--dry-run", str(script)])
        out, err = capsys.readouterr()
        return e.value.code, out, err

    code, text, _ = dry_run("torchrun")
    assert code == 0
    assert "-m slurmtorch.bootstrap.agent" in text and '--rdzv-endpoint "${MASTER_ADDR:-${nodes[0]}}:$MASTER_PORT"' in text
    assert "export MASTER_ADDR" in text and "GLOO_SOCKET_IFNAME=hsn0,hsn1,hsn2,hsn3" in text
    code, text, err = dry_run("mpirun")
    if preset == "ce":  # the Container Engine starts under srun: refused in one line, with the fix
        assert code != 0 and "cscs-ce container, which starts under srun" in err and "--launcher srun" in err
    else:
        assert code == 0 and '"$mpirun" -n 8 --map-by slot:PE=72:HWTCPUS --bind-to hwthread' in text


def test_site_list_shows_every_new_preset_as_valid(capsys, monkeypatch):
    monkeypatch.delenv("SLURMTORCH_SITE_PATH", raising=False)
    with pytest.raises(SystemExit) as e:
        main(["site", "list"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    rows = {line.split("\t")[0]: line.split("\t")[1] for line in out.splitlines()}
    for name in ("slingshot-nvidia", "mi250x", "azure-ndv5", "aws-p5", "gcp-a3u-a4", "cscs-alps"):
        assert name in rows and not rows[name].startswith("(invalid"), (name, rows.get(name))
