"""`slurmtorch chain FILE`: a chain of jobs (train -> evaluate -> export), printed, submitted
or followed as one, through `usecases.chain`."""

# No `from __future__ import annotations` here, as in sbatch.py: typer evals the annotations.

import json
import sys

import typer


def chain(
    ctx: typer.Context,
    file: str = typer.Argument(..., metavar="FILE", help="the chain file (YAML): parts: [...], and site: for all"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print every part's script, submit nothing"),
    wait: bool = typer.Option(False, "--wait", help="follow the chain to its end, part after part (rank 0's output "
                                                    "and each part's state), then report every part's end and "
                                                    "where it failed; exit 0 only if every part completed"),
    cancel_on_interrupt: bool = typer.Option(False, "--cancel-on-interrupt",
                                             help="with --wait: Ctrl-C cancels the part followed (default: the "
                                                  "chain runs on)"),
    as_json: bool = typer.Option(False, "--json", help="the parts as submitted, or with --wait how each ended, as "
                                                      "one JSON object on stdout, no part's output (docs/json.md)"),
) -> int:
    """Submit a chain of jobs, each after the one before; prints each part's job id.

    FILE lists the parts in order. A part has a name, a script (its path read from FILE's
    folder) or a module, args, and the options of `slurmtorch sbatch` by their Python names
    (nodes, gpus_per_node, time, preset, sbatch_args, ...), its own site if it runs elsewhere,
    and `after`: ok (the default: runs if the part before completed), any (once it ended,
    however) or singleton (as ok, and one job of its name at a time). A part that can no
    longer run (the one before failed) is cancelled by Slurm, and so is what follows it.
    All or nothing: a part refused cancels those already submitted.
    """
    # lazy: `slurmtorch --help` builds this verb and must not import yaml or jinja2
    from slurmtorch.usecases import chain as chains

    parts = chains.read_chain(file)
    command = ("slurmtorch", "chain", file)
    if dry_run:
        sys.stdout.write(chains.dry_run_text(chains.dry_run(parts, command)))
        return 0
    from slurmtorch.usecases import records  # lazy: as above

    submitted = chains.submit(parts, command, announce=_said if as_json else _announce)
    names = [p.name for p in submitted.parts]
    if not wait:
        if as_json:
            print(json.dumps(records.chain_submitted(names, submitted.job_ids, submitted.folders), indent=1))
        return 0
    ended = chains.follow(submitted, lambda line: print(line, file=sys.stderr, flush=True), cancel_on_interrupt,
                          logs=not as_json)
    for line in ended.lines:
        print(line, file=sys.stderr)
    if as_json:
        print(json.dumps(records.chain(names, submitted.job_ids, [p.after for p in submitted.parts],
                                       [e.state for e in ended.ends], ended.reports, ended.failed, ended.code,
                                       ended.lines), indent=1))
    return ended.code


def _said(submitted) -> None:
    """--json: stdout holds the one object; each part's id and folder on stderr."""
    for part, job_id, folder in zip(submitted.parts, submitted.job_ids, submitted.folders):
        print(f"submitted part {part.name!r}: job {job_id}; folder {folder}", file=sys.stderr, flush=True)


def _announce(submitted) -> None:
    """Each part's job id on stdout (`name id`), its folder on stderr."""
    for part, job_id, folder in zip(submitted.parts, submitted.job_ids, submitted.folders):
        print(f"{part.name} {job_id}", flush=True)
        print(f"submitted part {part.name!r}: job {job_id}; folder {folder}", file=sys.stderr, flush=True)
