"""What centres' documents need (issue 34): job-time values in `env`, container runs as
centres write them, several QOS on one partition, and fabric defaults an admin can see
change. Each on a small site of its own; the exports and launch lines read back through bash.
"""

from __future__ import annotations

import textwrap

import pytest

from slurmtorch.errors import SiteError, SpecError
from slurmtorch.submit import sites
from slurmtorch.submit.launch import render
from slurmtorch.submit.launch.spec import build_spec

from test_presets import exported, header
from test_render import golden_options

BASE = """\
    node_types:
      mi250x: {gpus: 8, gpu_vendor: amd, cpus: 56, fabric: ethernet}
    partitions:
      standard-g: {max_nodes: 8, max_time: "2-00:00:00", node_type: mi250x, default: true}
"""


def load(tmp_path, text: str, name: str = "centre"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(textwrap.dedent(BASE) + textwrap.dedent(text))
    return sites.load_site(path)


def render_with(site, **kw) -> str:
    return render.render_sbatch(build_spec(site, golden_options("centre", **kw)))


def problems(tmp_path, text: str) -> list[tuple[str, str | None]]:
    with pytest.raises(SiteError) as exc:
        load(tmp_path, text)
    return list(exc.value.problems)


# --------------------------------------------------------------------------- job-time values


def test_a_job_time_value_expands_on_the_node_and_the_rest_of_it_stays_literal(tmp_path):
    """LUMI's AI guide: TORCH_HOME=/scratch/${SLURM_JOB_ACCOUNT}/${USER}/torch_home and a
    per-job MIOpen cache; `{expand: ...}` names such a value, expanded when the job runs."""
    site = load(tmp_path, """\
        env:
          TORCH_HOME: {expand: "/scratch/${SLURM_JOB_ACCOUNT}/${USER}/torch_home"}
          MIOPEN_USER_DB_PATH: {expand: "/tmp/miopen-$SLURM_JOB_ID 'x' `id`"}
    """)
    text = render_with(site)
    env = exported(text, ["TORCH_HOME", "MIOPEN_USER_DB_PATH"],
                   before={"SLURM_JOB_ACCOUNT": "project_465", "USER": "ana", "SLURM_JOB_ID": "77"})
    assert env == {"TORCH_HOME": "/scratch/project_465/ana/torch_home",
                   "MIOPEN_USER_DB_PATH": "/tmp/miopen-77 'x' `id`"}


def test_a_users_own_env_stays_literal_beside_a_job_time_value(tmp_path):
    site = load(tmp_path, 'env: {TORCH_HOME: {expand: "/scratch/$USER"}}\n')
    text = render_with(site, env=("TORCH_HOME=/scratch/$USER/mine", "OTHER=${HOME}"))
    assert exported(text, ["TORCH_HOME", "OTHER"], before={"USER": "ana", "HOME": "/h"}) == {
        "TORCH_HOME": "/scratch/$USER/mine", "OTHER": "${HOME}"}


def test_a_composition_over_a_job_time_value_keeps_it_expanding(tmp_path):
    site = load(tmp_path, """\
        env: {DATA: {expand: "/scratch/$USER"}}
        append_path: {DATA: [/opt/data]}
    """)
    assert exported(render_with(site), ["DATA"], before={"USER": "ana"}) == {"DATA": "/scratch/ana:/opt/data"}


@pytest.mark.parametrize("value, problem", [
    ('{expand: "/x/$(id)"}', "a '$' that is not $NAME or ${NAME}"),
    ('{expand: "${USER:-nobody}"}', "a '$' that is not $NAME or ${NAME}"),
    ('{expand: 3}', "expected a string"),
    ('{expand: "a", other: "b"}', "expected a string or {expand: VALUE}"),
])
def test_a_job_time_value_is_only_variables_and_literal_text(tmp_path, value, problem):
    (message, _tip), = problems(tmp_path, f"env: {{X: {value}}}\n")
    assert problem in message


def test_the_tip_for_a_dollar_in_a_plain_value_fits_what_was_written(tmp_path):
    """`DIR:$LD_LIBRARY_PATH` (AWS's and Google's guides) is a composition: prepend_path;
    anything else with a variable in it is a job-time value."""
    (_m, tip), = problems(tmp_path, 'env: {LD_LIBRARY_PATH: "/opt/amazon/efa/lib:$LD_LIBRARY_PATH"}\n')
    assert "prepend_path: {LD_LIBRARY_PATH: [/opt/amazon/efa/lib]}" in tip
    (_m, tip), = problems(tmp_path, 'env: {LD_LIBRARY_PATH: "${LD_LIBRARY_PATH}:/opt/a:/opt/b"}\n')
    assert "append_path: {LD_LIBRARY_PATH: [/opt/a, /opt/b]}" in tip
    (message, tip), = problems(tmp_path, 'env: {TORCH_HOME: "/scratch/${SLURM_JOB_ACCOUNT}/torch"}\n')
    assert "would be exported literally" in message
    assert tip == 'to expand it when the job runs: TORCH_HOME: {expand: "/scratch/${SLURM_JOB_ACCOUNT}/torch"}'


def test_a_job_time_value_cannot_reach_a_container_engine_edf(tmp_path):
    site = load(tmp_path, """\
        env: {TORCH_HOME: {expand: "/scratch/$USER"}}
        container: {runtime: cscs-ce, image: "nvcr.io#nvidia/pytorch:24.05-py3"}
    """)
    with pytest.raises(SpecError, match="TORCH_HOME is expanded when the job runs"):
        render_with(site)


def test_site_show_and_the_doctor_see_a_job_time_value_as_written_and_as_expanded(tmp_path):
    from slurmtorch.submit.launch.environment import expanded

    site = load(tmp_path, 'env: {TORCH_HOME: {expand: "/scratch/${USER}/t"}, PLAIN: "1"}\n')
    assert sites.site_as_dict(site)["env"] == {"TORCH_HOME": {"expand": "/scratch/${USER}/t"}, "PLAIN": "1"}
    assert expanded(site.env, {"USER": "ana"}) == [("TORCH_HOME", "/scratch/ana/t"), ("PLAIN", "1")]


# --------------------------------------------------------------------------- containers


def test_apptainer_run_as_lumi_writes_it_and_no_gpu_flag_where_the_bindings_give_the_mounts(tmp_path):
    """LUMI's AI guide: `srun ... singularity run $SIF ...` (the image's runscript activates its
    environment) and no --rocm (the lumi-aif-singularity-bindings module gives the mounts)."""
    site = load(tmp_path, """\
        container:
          runtime: apptainer
          command: singularity
          subcommand: run
          gpu_flag: false
          image: /appl/local/laifs/containers/torch.sif
    """)
    text = render_with(site)
    launch = next(ln for ln in text.splitlines() if ln.lstrip().startswith("singularity "))
    assert launch.split()[:2] == ["singularity", "run"]
    assert "--rocm" not in text and "--nv" not in text
    default = render_with(load(tmp_path, "container: {runtime: apptainer, image: /x.sif}\n", "other"))
    assert "apptainer exec --rocm" in default


def test_gpu_flag_false_leaves_out_podman_hpcs_gpu_option_too(tmp_path):
    """NVIDIA GPUs (the Slingshot site's): podman-hpc's --gpu unless the site says gpu_flag: false."""
    without = slingshot_site(tmp_path, "container: {runtime: podman-hpc, image: 'x:1', gpu_flag: false}\n")
    assert " --gpu " not in render_with(without)
    assert sites.site_as_dict(without)["container"]["gpu_flag"] is False
    default = slingshot_site(tmp_path, "container: {runtime: podman-hpc, image: 'x:1'}\n", "with")
    assert "podman-hpc run --rm --network=host --ipc=host --pid=host --gpu " in render_with(default)


@pytest.mark.parametrize("text, problem", [
    ("container: {runtime: shifter, image: 'x:1', subcommand: run}", "subcommand is apptainer's"),
    ("container: {runtime: charliecloud, image: /x, gpu_flag: false}", "gpu_flag is apptainer's and podman-hpc's"),
])
def test_apptainer_only_keys_are_refused_elsewhere(tmp_path, text, problem):
    (message, _tip), = problems(tmp_path, text + "\n")
    assert problem in message


def test_a_bare_word_in_container_args_is_a_split_option(tmp_path):
    """docs/site-admins.md showed [--module=gpu,nccl-plugin]: YAML splits it at the comma, and
    shifter would run `nccl-plugin` as the command."""
    split = "container: {runtime: shifter, image: 'x:1', args: [--module=gpu,nccl-plugin]}\n"
    (message, tip), = problems(tmp_path, split)
    assert "container.args[1]: 'nccl-plugin' is not an option" in message
    assert tip == "quote an option whose value holds a comma: args: ['--module=gpu,nccl-plugin']"
    site = load(tmp_path, "container: {runtime: shifter, image: 'x:1', args: ['--module=gpu,nccl-plugin']}\n")
    assert site.container.args == ("--module=gpu,nccl-plugin",)
    # A value after an option written without '=' is that option's (apptainer --bind SRC).
    site = load(tmp_path, "container: {runtime: apptainer, image: /x.sif, args: [--bind, /scratch, -B, /p]}\n")
    assert site.container.args == ("--bind", "/scratch", "-B", "/p")


# --------------------------------------------------------------------------- several QOS on one partition

LEONARDO = """\
    required: [account]
    node_types:
      a100: {gpus: 4, cpus: 32, fabric: infiniband, rdma: true}
    partitions:
      boost_usr_prod: {max_nodes: 64, max_time: "1-00:00:00", node_type: a100, default: true, qos: normal}
      boost_qos_dbg:
        slurm_partition: boost_usr_prod
        qos: boost_qos_dbg
        max_nodes: 2
        max_time: "00:30:00"
        node_type: a100
      boost_qos_lprod:
        slurm_partition: boost_usr_prod
        qos: boost_qos_lprod
        max_nodes: 3
        max_time: "4-00:00:00"
        node_type: a100
"""


@pytest.fixture
def leonardo(tmp_path):
    path = tmp_path / "leonardo.yaml"
    path.write_text(textwrap.dedent(LEONARDO))
    return sites.load_site(path)


def test_several_qos_on_one_slurm_partition_each_with_its_limits(leonardo):
    """CINECA Leonardo's boost_usr_prod with normal, boost_qos_dbg and boost_qos_lprod: each its
    own entry (slurm_partition), its limits checked before sbatch, one Slurm partition written."""
    dbg = header(render_with(leonardo, partition="boost_qos_dbg", account="p1", nodes=2, time="00:30:00"))
    assert (dbg["partition"], dbg["qos"]) == ("boost_usr_prod", "boost_qos_dbg")
    with pytest.raises(SpecError, match="at most 2"):
        render_with(leonardo, partition="boost_qos_dbg", account="p1", nodes=3)
    with pytest.raises(SpecError, match="00:30:00"):
        render_with(leonardo, partition="boost_qos_dbg", account="p1", time="01:00:00")
    # -p the Slurm partition with -q a QOS of it: that QOS's entry and limits.
    lprod = header(render_with(leonardo, partition="boost_usr_prod", qos="boost_qos_lprod", account="p1",
                               time="3-00:00:00"))
    assert (lprod["partition"], lprod["qos"], lprod["time"]) == ("boost_usr_prod", "boost_qos_lprod", "3-00:00:00")
    with pytest.raises(SpecError, match="at most 3"):
        render_with(leonardo, partition="boost_usr_prod", qos="boost_qos_lprod", account="p1", nodes=4)
    assert header(render_with(leonardo, account="p1"))["qos"] == "normal"


def test_two_entries_for_one_partition_and_qos_are_refused(tmp_path):
    text = LEONARDO + """\
      again:
        slurm_partition: boost_usr_prod
        qos: boost_qos_dbg
        max_nodes: 1
        max_time: "00:10:00"
        node_type: a100
    """
    path = tmp_path / "l.yaml"
    path.write_text(textwrap.dedent(text))
    with pytest.raises(SiteError) as exc:
        sites.load_site(path)
    assert "partitions.again: Slurm partition 'boost_usr_prod' with QOS 'boost_qos_dbg' is already " \
           "partitions.boost_qos_dbg" in exc.value.message


# --------------------------------------------------------------------------- fabric defaults, by edition

SLINGSHOT = """\
    node_types:
      a100: {gpus: 4, cpus: 64, fabric: slingshot, interfaces: [hsn0]}
    partitions:
      gpu: {max_nodes: 8, max_time: "12:00:00", node_type: a100, default: true}
"""


def slingshot_site(tmp_path, extra: str = "", name: str = "ss"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(textwrap.dedent(SLINGSHOT) + textwrap.dedent(extra))
    return sites.load_site(path)


def test_slingshot_defaults_are_what_hpe_and_the_centres_all_document(tmp_path):
    """HPE's guide adds the alt_read rendezvous (FI_CXI_RDZV_*, --network=disable_rdzv_get), hybrid
    matching and a 2048 transmit queue; CSCS (nccl_env_vars), LUMI (its AI guide) and NERSC
    (env_nccl.sh) set none of them, and CSCS documents other matching and queue values: the
    defaults are the settings they share, and a site adds the rest."""
    text = render_with(slingshot_site(tmp_path), nodes=2)
    assert "#SBATCH --network" not in text
    env = exported(text, ["FI_CXI_RDZV_PROTO", "FI_CXI_RDZV_EAGER_SIZE", "FI_CXI_RDZV_GET_MIN", "FI_CXI_RX_MATCH_MODE",
                          "FI_CXI_DEFAULT_TX_SIZE", "FI_CXI_DISABLE_HOST_REGISTER", "FI_MR_CACHE_MONITOR",
                          "FI_CXI_DEFAULT_CQ_SIZE", "NCCL_NET_GDR_LEVEL", "NCCL_CROSS_NIC", "NCCL_NET"])
    assert env == {"FI_CXI_RDZV_PROTO": "<unset>", "FI_CXI_RDZV_EAGER_SIZE": "<unset>",
                   "FI_CXI_RDZV_GET_MIN": "<unset>", "FI_CXI_RX_MATCH_MODE": "<unset>",
                   "FI_CXI_DEFAULT_TX_SIZE": "<unset>", "FI_CXI_DISABLE_HOST_REGISTER": "1",
                   "FI_MR_CACHE_MONITOR": "userfaultfd", "FI_CXI_DEFAULT_CQ_SIZE": "131072",
                   "NCCL_NET_GDR_LEVEL": "PHB", "NCCL_CROSS_NIC": "1", "NCCL_NET": "AWS Libfabric"}


def test_a_site_pinned_to_an_edition_of_the_defaults_renders_with_it(tmp_path):
    """`fabric_defaults: 2` keeps what edition 2 (issue 25: HPE's whole table) rendered, until the
    admin moves the pin."""
    text = render_with(slingshot_site(tmp_path, "fabric_defaults: 2\n"), nodes=2)
    assert header(text)["network"] == "disable_rdzv_get"
    assert exported(text, ["FI_CXI_RDZV_PROTO", "FI_CXI_DEFAULT_TX_SIZE"]) == {
        "FI_CXI_RDZV_PROTO": "alt_read", "FI_CXI_DEFAULT_TX_SIZE": "2048"}
    one = exported(render_with(slingshot_site(tmp_path, "fabric_defaults: 1\n", "one"), nodes=2), ["NCCL_NET"])
    assert one == {"NCCL_NET": "<unset>"}
    with pytest.raises(SiteError, match="no edition 9 of the fabric defaults"):
        slingshot_site(tmp_path, "fabric_defaults: 9\n", "nine")


# --------------------------------------------------------------------------- the centre's own network layer

FABRIC_NAMES = ["FI_CXI_DISABLE_HOST_REGISTER", "FI_MR_CACHE_MONITOR", "FI_CXI_DEFAULT_CQ_SIZE", "NCCL_NET_GDR_LEVEL",
                "NCCL_CROSS_NIC", "NCCL_NET", "HSA_FORCE_FINE_GRAIN_PCIE", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"]


def test_interfaces_only_exports_the_interface_names_and_leaves_the_rest_to_the_centre(tmp_path):
    """`fabric_env: interfaces-only`: where a centre's own layer sets the network libraries (LUMI's
    bindings module, NERSC's nccl-plugin, CSCS's Container Engine hooks), the fabric's defaults
    stay out of the job and only its interface names are exported; the site's own env still is."""
    site = slingshot_site(tmp_path, "fabric_env: interfaces-only\nenv: {NCCL_DEBUG: WARN}\n")
    env = exported(render_with(site, nodes=2), [*FABRIC_NAMES, "NCCL_DEBUG"])
    assert {k: v for k, v in env.items() if v != "<unset>"} == {
        "NCCL_SOCKET_IFNAME": "=hsn0", "GLOO_SOCKET_IFNAME": "hsn0", "NCCL_DEBUG": "WARN"}
    assert dict(sites.site_as_dict(site)["node_types"]["a100"]["network_env"]) == {
        "NCCL_SOCKET_IFNAME": "=hsn0", "GLOO_SOCKET_IFNAME": "hsn0"}


def test_a_preset_takes_the_centres_layer_or_the_fabric_defaults_whatever_the_site_says(tmp_path):
    presets = """\
        presets:
          image: {fabric_env: interfaces-only}
          bare: {fabric_env: full}
    """
    full = slingshot_site(tmp_path, presets)
    assert exported(render_with(full, nodes=2), ["NCCL_NET"]) == {"NCCL_NET": "AWS Libfabric"}
    assert exported(render_with(full, nodes=2, preset="image"), ["NCCL_NET", "NCCL_SOCKET_IFNAME"]) == {
        "NCCL_NET": "<unset>", "NCCL_SOCKET_IFNAME": "=hsn0"}
    centre = slingshot_site(tmp_path, "fabric_env: interfaces-only\n" + textwrap.dedent(presets), "centre")
    assert exported(render_with(centre, nodes=2), ["NCCL_NET"]) == {"NCCL_NET": "<unset>"}
    assert exported(render_with(centre, nodes=2, preset="bare"), ["NCCL_NET"]) == {"NCCL_NET": "AWS Libfabric"}
    with pytest.raises(SiteError, match="fabric_env: invalid value 'none'"):
        slingshot_site(tmp_path, "fabric_env: none\n", "bad")


def test_an_interfaces_only_site_has_no_edition_of_the_defaults_to_pin(tmp_path, capsys):
    from slurmtorch.cli.main import main

    slingshot_site(tmp_path, "fabric_env: interfaces-only\n")
    with pytest.raises(SystemExit):
        main(["site", "validate", str(tmp_path / "ss.yaml")])
    assert "note:" not in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["site", "changes", str(tmp_path / "ss.yaml"), "--from", "1"])
    assert "node type" not in capsys.readouterr().out


def test_site_changes_shows_what_each_edition_changes_for_this_site(tmp_path, capsys):
    from slurmtorch.cli.main import main

    slingshot_site(tmp_path, "fabric_defaults: 2\n")
    with pytest.raises(SystemExit) as exc:
        main(["site", "changes", str(tmp_path / "ss.yaml")])
    out, err = capsys.readouterr()
    assert exc.value.code in (0, None), err
    assert "edition 3" in out and "pinned to edition 2" in out
    for line in ("node type a100: - FI_CXI_RDZV_PROTO=alt_read", "node type a100: - #SBATCH --network=disable_rdzv_get",
                 "node type a100: - FI_CXI_DEFAULT_TX_SIZE=2048"):
        assert line in out
    # An edition that changes nothing this site renders says so.
    ib = tmp_path / "ib.yaml"
    ib.write_text(textwrap.dedent(BASE))
    with pytest.raises(SystemExit):
        main(["site", "changes", str(ib), "--from", "1"])
    assert "no change to what this site renders" in capsys.readouterr().out


def test_an_edition_of_the_defaults_is_never_edited():
    """A change to a bundled default is a new edition (with its sources), never an edit of one an
    admin may have pinned: each edition's tables are fingerprinted here."""
    from slurmtorch.submit.sites import fabric

    assert fabric.CURRENT_EDITION == max(fabric.EDITIONS) == 3
    assert {n: fabric.fingerprint(n) for n in fabric.EDITIONS} == EDITION_FINGERPRINTS


EDITION_FINGERPRINTS = {1: '1991c929888990c5', 2: 'fba73bbf80d8b578', 3: '84907adc9e094df7'}


def test_validate_says_when_a_pinned_site_is_behind_the_current_defaults(tmp_path, capsys):
    from slurmtorch.cli.main import main

    slingshot_site(tmp_path, "fabric_defaults: 2\n")
    with pytest.raises(SystemExit) as exc:
        main(["site", "validate", str(tmp_path / "ss.yaml")])
    err = capsys.readouterr().err
    assert exc.value.code in (0, None)
    assert f"note: pinned to edition 2 of the fabric defaults (the current one is 3); what a newer one changes " \
           f"in its jobs: slurmtorch site changes {tmp_path / 'ss.yaml'}" in err


def test_the_slurm_partitions_own_name_picks_its_entries_too(tmp_path):
    """Entries named for their QOS alone: `-p boost_usr_prod -q boost_qos_dbg`, as users write it,
    still finds the debug entry (and the doctor finds it from SLURM_JOB_PARTITION)."""
    path = tmp_path / "q.yaml"
    path.write_text(textwrap.dedent("""\
        node_types:
          a100: {gpus: 4, cpus: 32, fabric: infiniband, rdma: true}
        partitions:
          prod: {slurm_partition: boost_usr_prod, qos: normal, max_nodes: 64, max_time: "1-00:00:00", node_type: a100,
                 default: true}
          dbg: {slurm_partition: boost_usr_prod, qos: boost_qos_dbg, max_nodes: 2, max_time: "00:30:00",
                node_type: a100}
    """))
    site = sites.load_site(path)
    assert site.partition("boost_usr_prod", qos="boost_qos_dbg").name == "dbg"
    assert site.partition("boost_usr_prod").name == "prod"
    h = header(render_with(site, partition="boost_usr_prod", qos="boost_qos_dbg", time="00:10:00"))
    assert (h["partition"], h["qos"]) == ("boost_usr_prod", "boost_qos_dbg")


def test_validate_says_an_unpinned_plugin_fabric_site_follows_whatever_edition_comes(tmp_path, capsys):
    """An admin's unpinned Slingshot site would take the next edition's changes unseen: validate says
    so once, with the pin to write; a site on a fabric with no editioned defaults hears nothing."""
    from slurmtorch.cli.main import main

    slingshot_site(tmp_path)
    with pytest.raises(SystemExit):
        main(["site", "validate", str(tmp_path / "ss.yaml")])
    err = capsys.readouterr().err
    assert "note: not pinned: its jobs take the current edition (3) of the slingshot defaults, and a newer " \
           "slurmtorch's changes; pin it with fabric_defaults: 3" in err
    ib = tmp_path / "ib.yaml"
    ib.write_text(textwrap.dedent(BASE))
    with pytest.raises(SystemExit):
        main(["site", "validate", str(ib)])
    assert "note:" not in capsys.readouterr().err
