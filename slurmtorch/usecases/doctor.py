"""`doctor`: this node, or (`--allocation`) the whole allocation, checked against the site.

The site is the one asked for, else $SLURMTORCH_SITE, else (inside a slurmtorch job) the
one its script was rendered for, else `local` where Slurm is not; the environment is exactly
what a job script would export there (a spec built for it alone). Here: the node checks,
a line each. `--allocation`: one srun step over the allocation, planned as a job's steps
are (`launchplan.allocation_check_step`), its ranks running the in-allocation check.
The front end passes its streams; the exit code is 1 where anything failed.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import IO

from slurmtorch import doctor as d
from slurmtorch.doctor.binding import job_cpus_per_node
from slurmtorch.errors import SlurmtorchError, SpecError, SubmitError
from slurmtorch.submit import sites
from slurmtorch.submit.launch import spec
from slurmtorch.submit.edge import runner
from slurmtorch.submit.launch.environment import composed, expanded
from slurmtorch.submit.launch.launchplan import allocation_check_step
from slurmtorch.options import Options, positive
from slurmtorch.submit.sites.model import parse_time


def check(site: str | None, node_type: str | None, partition: str | None, preset: str | None, allocation: bool,
          ntasks_per_node: int | None, max_bytes: int, timeout: int, out: IO[str], err: IO[str]) -> int:
    """The checks run and said on `out` (an allocation's ranks' errors on `err`); 1 if any failed."""
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
          + (f", partition {part!r}" if part else ""), file=out, flush=True)
    if allocation:
        return _allocation(site_obj, nt, part, python, env, backend, ntasks_per_node, max_bytes, timeout, out, err)
    facts = d.gather_node_facts(python, dict(env))
    print(f"node {facts.hostname}:", file=out)
    checks = d.node_checks(facts, site_obj, nt, env, backend)
    for c in checks:
        print(c.line(), file=out)
    print(d.summary(checks), file=out)
    return 1 if d.any_failed(checks) else 0


def _allocation(site_obj, nt, part, python, env, backend, ntasks_per_node, max_bytes, timeout, out, err) -> int:
    """One srun step over the allocation, exactly as the rendered job script launches ranks
    (the site's environment exported, `--mpi=<site plugin>`, the bootstrap with
    `--from slurm`), but with `--no-init`: the doctor's ranks test MASTER_ADDR before
    any collective. Rank 0 prints the report."""

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
        print(f"fail  could not launch the allocation step: {e.message}  (fix: {e.tip or 'is srun on PATH?'})", file=out)
        return 1
    out.write(proc.stdout)
    if proc.returncode != 0:
        out.flush()
        err.write(proc.stderr)
        print(f"fail  the allocation step exited {proc.returncode} (the ranks' errors are above)  "
              "(fix: see the first rank that failed)", file=out)
    return 1 if proc.returncode != 0 else 0


def step_layout(environ, ntasks_per_node: int | None) -> list[str]:
    """srun's layout for the allocation step (pure): every node, `ntasks_per_node` ranks each
    (default: the allocation's tasks per node, else 1), and their count, always written: srun
    otherwise takes salloc's SLURM_NTASKS, which `salloc -N2 --ntasks-per-node 2` sets to 4, and
    with one a node asked refuses "More processors requested than permitted". Each rank gets
    its share of the allocation's CPUs, as a rendered job's srun gives it (srun no longer takes
    salloc's -c since Slurm 22.05): the binding check then reports the node's binding."""
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
