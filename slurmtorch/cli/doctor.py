"""`slurmtorch doctor`: check this node, or (--allocation) the whole allocation, against the site."""

from __future__ import annotations

import os
import shutil
import sys
from typing import Optional

import typer

from slurmtorch.cli._common import cluster_option, on_cluster
from slurmtorch.errors import SlurmtorchError, SpecError, SubmitError
from slurmtorch.submit.options import Options, positive


def doctor(
    ctx: typer.Context,
    site: Optional[str] = typer.Option(None, "--site", help="site name or path (default: $SLURMTORCH_SITE, else the job's own site; where Slurm is not, local)"),
    node_type: Optional[str] = typer.Option(None, "--node-type", help="node type to check against (default: the partition's)"),
    partition: Optional[str] = typer.Option(None, "--partition", "-p", help="partition whose node type applies"),
    preset: Optional[str] = typer.Option(None, "--preset", help="preset whose environment applies"),
    allocation: bool = typer.Option(False, "--allocation",
                                    help="inside salloc/sbatch: launch one rank per node (srun) and check the "
                                         "layout, MASTER_ADDR reachability and all_reduce bandwidth"),
    ntasks_per_node: Optional[int] = typer.Option(None, "--ntasks-per-node", show_default=False,
                                                  help="ranks per node for --allocation (default: the "
                                                       "allocation's tasks per node, else 1)"),
    max_bytes: int = typer.Option(16 << 20, "--max-bytes", help="largest all_reduce message for --allocation"),
    timeout: int = typer.Option(120, "--timeout", help="seconds for the whole --allocation step"),
    cluster: Optional[str] = cluster_option(),
) -> int:
    """Check torch, GPUs, InfiniBand, interfaces, MPI/PMIx and the site's environment here.

    Every line is ok, warn or fail with its fix; the exit code is 1 if anything failed.
    With --cluster: on that cluster's login host, with its site.
    """
    remote = on_cluster(ctx, cluster, site=True)
    if remote is not None:
        return remote
    # lazy: `slurmtorch --help` builds every verb and must not import yaml or the doctor's checks
    from slurmtorch import doctor as d
    from slurmtorch.submit import sites
    from slurmtorch.submit import spec
    from slurmtorch.submit.environment import composed, expanded
    from slurmtorch.submit.sites.model import parse_time

    # --site, else $SLURMTORCH_SITE, else (run inside a slurmtorch job) the site its script
    # was rendered for; else where Slurm is, none (as sbatch says); elsewhere "local", mpirun's.
    ref, source = d.site_for_doctor(site, os.environ)
    if ref is None and shutil.which("sbatch"):
        sites.site_ref(None, None)  # raises sbatch's own "no site given" and its tip
    try:
        site_obj = sites.load_site(ref or "local")
    except SlurmtorchError:
        if source != d.RECORDED:
            raise
        site_obj = sites.load_site("local")  # only its name was recorded, and that is not on the search path
    part_name = partition or (os.environ.get("SLURM_JOB_PARTITION") if node_type is None else None)
    if part_name and not any(part_name in (p.name, p.slurm_name) for p in site_obj.partitions):
        part_name = partition  # an allocation on a partition the site does not describe: use the default
    nt, part = d.resolve_node_type(site_obj, node_type, part_name)
    python = site_obj.python or sys.executable
    # The environment exactly as a job script would export it (fabric, site, node type,
    # preset): build a spec of as few nodes as the partition takes. Its time limit is the
    # partition's (within its node-minutes), so a preset's longer default cannot make the
    # doctor itself refuse to run.
    entry = next((p for p in site_obj.partitions if p.name == part), None)
    nodes = (entry.min_nodes or 1) if entry is not None else 1
    max_time = entry.max_time if entry is not None else None
    if entry is not None and entry.max_node_minutes is not None:
        max_time = str(max(1, min(parse_time(entry.max_time) // 60, entry.max_node_minutes // nodes)))
    # The doctor submits nothing: a site's `required:` account/QOS gets a stand-in, so that
    # the spec (built only for its environment) is not refused for lacking one.
    options = Options(module="slurmtorch.doctor", partition=part, preset=preset, nodes=nodes, time=max_time,
                      account="(doctor)", qos="(doctor)")
    job = spec.build_spec(site_obj, options) if part is not None else None
    env = (expanded(job.env, os.environ) + composed(job.env_paths, os.environ) if job is not None else
           list(nt.network_env(site_obj.fabric_defaults, site_obj.interfaces_only)) + [(k, v) for k, v in site_obj.env if v is not None])
    backend = d.wanted_backend(job.backend if job is not None else None, nt)
    where = site_obj.source if ref else "no site given, and no Slurm here: slurmtorch mpirun's site"
    print(f"slurmtorch doctor: site {site_obj.name!r} ({where}), node type {nt.name!r}"
          + (f", partition {part!r}" if part else ""), flush=True)
    if allocation:
        return _allocation(site_obj, nt, part, python, env, backend, ntasks_per_node, max_bytes, timeout)
    facts = d.gather_node_facts(python, dict(env))
    print(f"node {facts.hostname}:")
    checks = d.node_checks(facts, site_obj, nt, env, backend)
    for c in checks:
        print(c.line())
    print(d.summary(checks))
    return 1 if d.any_failed(checks) else 0


def _allocation(site_obj, nt, part, python, env, backend, ntasks_per_node, max_bytes, timeout) -> int:
    """One srun step over the allocation, exactly as the rendered job script launches ranks
    (the site's environment exported, `--mpi=<site plugin>`, the bootstrap with
    `--from slurm`), but with `--no-init`: the doctor's ranks test MASTER_ADDR before
    any collective. Rank 0 prints the report."""
    from slurmtorch.submit.edge import runner  # lazy: the edge (subprocess), only --allocation runs it
    from slurmtorch.submit.launchplan import allocation_check_step  # lazy: only --allocation launches

    if not os.environ.get("SLURM_JOB_ID") or not (os.environ.get("SLURM_JOB_NUM_NODES") or
                                                  os.environ.get("SLURM_NNODES")):
        raise SpecError("--allocation needs a Slurm allocation (SLURM_JOB_ID is not set)",
                        tip=f"salloc -N 2 slurmtorch doctor --allocation --site {site_obj.name}, or as a batch job")
    checks = ["--backend", backend, "--timeout", str(timeout), "--from", "slurm", "--no-init", "-m",
              "slurmtorch.doctor", "--site", site_obj.source, "--node-type", nt.name, "--max-bytes", str(max_bytes)]
    if part:
        checks += ["--partition", part]
    argv = allocation_check_step(python, env, site_obj.srun_mpi, step_layout(os.environ, ntasks_per_node),
                                 checks).command()
    try:
        proc = runner.run(argv, timeout=timeout, check=False)
    except SubmitError as e:
        print(f"fail  could not launch the allocation step: {e.message}  (fix: {e.tip or 'is srun on PATH?'})")
        return 1
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        sys.stdout.flush()
        sys.stderr.write(proc.stderr)
        print(f"fail  the allocation step exited {proc.returncode} (the ranks' errors are above)  "
              "(fix: see the first rank that failed)")
    return 1 if proc.returncode != 0 else 0


def step_layout(environ, ntasks_per_node: int | None) -> list[str]:
    """srun's layout for the allocation step (pure): every node, `ntasks_per_node` ranks each
    (default: the allocation's tasks per node, else 1), and their count, always written: srun
    otherwise takes salloc's SLURM_NTASKS, which `salloc -N2 --ntasks-per-node 2` sets to 4, and
    with one a node asked refuses "More processors requested than permitted". Each rank gets
    its share of the allocation's CPUs, as a rendered job's srun gives it (srun no longer takes
    salloc's -c since Slurm 22.05): the binding check then reports the node's binding."""
    from slurmtorch.doctor.binding import job_cpus_per_node  # lazy: `slurmtorch --help` builds this verb

    nodes = int(environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES"))
    if ntasks_per_node is None:
        given = environ.get("SLURM_NTASKS_PER_NODE", "").strip()
        counts = job_cpus_per_node(environ.get("SLURM_TASKS_PER_NODE", ""))  # "2(x2)": the same form
        ntasks_per_node = int(given) if given.isdigit() and int(given) > 0 else min(counts) if counts else 1
    positive("--ntasks-per-node", ntasks_per_node)
    per_node = job_cpus_per_node(environ.get("SLURM_JOB_CPUS_PER_NODE", ""))
    cpus_per_task = max(1, min(per_node) // ntasks_per_node) if per_node else 1
    return [f"--nodes={nodes}", f"--ntasks={nodes * ntasks_per_node}", f"--ntasks-per-node={ntasks_per_node}",
            f"--cpus-per-task={cpus_per_task}"]
