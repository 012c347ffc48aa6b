"""The bundled vendor presets: each renders what its public document says.

One test per preset, its document in the docstring: the variables that document names
appear in the rendered batch script with the documented values, read back through a real
bash (so quoting and path composition count, not only the text).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from slurmtorch.cli.main import main
from slurmtorch.submit import render
from slurmtorch.submit import sites
from slurmtorch.submit.spec import build_spec

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


def test_slingshot_nvidia_follows_hpe_and_nersc():
    """HPE's Slingshot CCL settings (https://github.com/HewlettPackard/shs-ccl-docs/blob/main/ccl_env.sh)
    and NERSC's for the nccl-ofi plugin (https://github.com/NERSC/nccl-ofi-plugin/blob/main/env_nccl.sh,
    https://github.com/NERSC/podman-hpc/blob/main/etc/modules.d/nccl.yaml): FI_CXI_DISABLE_HOST_REGISTER=1,
    FI_MR_CACHE_MONITOR=userfaultfd, NCCL_CROSS_NIC=1, NCCL_NET_GDR_LEVEL=PHB, NCCL on the hsn
    interfaces, the plugin before LD_LIBRARY_PATH. Jobs are QOS-routed with -q and -C gpu and
    charged with -A (https://docs.nersc.gov/jobs/policy/): no #SBATCH --partition."""
    text = rendered("slingshot-nvidia")
    env = exported(text, [*HPE_CCL, "FI_MR_CACHE_MONITOR", "NCCL_SOCKET_IFNAME", "LD_LIBRARY_PATH"],
                   {"LD_LIBRARY_PATH": "/usr/lib64"})
    assert {k: env[k] for k in HPE_CCL} == HPE_CCL and env["FI_MR_CACHE_MONITOR"] == "userfaultfd"
    assert env["NCCL_SOCKET_IFNAME"] == "=hsn0,hsn1,hsn2,hsn3"  # NERSC's `hsn` prefix, exactly
    assert env["LD_LIBRARY_PATH"] == ("/global/common/software/nersc9/nccl/2.19/plugin/lib:"
                                      "/global/common/software/nersc9/nccl/2.19/plugin/deps/lib:/usr/lib64")
    h = header(text)
    assert "partition" not in h and (h["qos"], h["constraint"], h["account"]) == ("regular", "gpu", "proj0001")
    assert "--mpi=cray_shasta" in rank_srun(text)
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


def test_site_list_shows_every_new_preset_as_valid(capsys, monkeypatch):
    monkeypatch.delenv("SLURMTORCH_SITE_PATH", raising=False)
    with pytest.raises(SystemExit) as e:
        main(["site", "list"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    rows = {line.split("\t")[0]: line.split("\t")[1] for line in out.splitlines()}
    for name in ("slingshot-nvidia", "mi250x", "azure-ndv5", "aws-p5", "gcp-a3u-a4"):
        assert name in rows and not rows[name].startswith("(invalid"), (name, rows.get(name))
