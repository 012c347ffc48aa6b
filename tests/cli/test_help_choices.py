"""What --help says an option accepts, and what it defaults to, is what the code does.

`--container-runtime`'s help once left out charliecloud, which the code accepted, and
`alloc -J` said it defaulted to "the script's name" where alloc has no script. Every choice
list --help shows is read off the list the code checks, and pinned here, verb by verb.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import click
import pytest
import typer

from slurmtorch import initargs
from slurmtorch.backends import BACKENDS
from slurmtorch.cli.main import _VERBS, build_app
from slurmtorch.localrank import LOCAL_RANK_FORMS
from slurmtorch.protocol import CLUSTER_SPEC_SHAPES, PLACEMENTS
from slurmtorch.roles import ROLE_ORDER
from slurmtorch.options import CONTAINER_RUNTIMES, INTERACTIVE_JOB_NAME, LAUNCHERS

import test_program_args

cli = test_program_args.cli  # the in-process CLI fixture

# flag -> the list the code checks its value against.
CHOICES = {
    "--backend": BACKENDS, "--launcher": LAUNCHERS, "--container-runtime": CONTAINER_RUNTIMES,
    "--placement": PLACEMENTS, "--local-rank-arg": LOCAL_RANK_FORMS, "--cluster-spec": CLUSTER_SPEC_SHAPES,
    "--init-args": initargs.SHAPES,
}
# A choice list: lower-case words joined by '|' (SIZE[K|M|G|T] and '[rack1|rack2]' are not).
_LIST = re.compile(r"[a-z][a-z0-9_-]*(?:\|[a-z][a-z0-9_-]*)+")


def options_of_every_verb():
    """(verb path, click option) for every option of every verb and `site` subcommand."""
    for verb in _VERBS:
        command = typer.main.get_command(build_app([verb])).commands[verb]
        subs = command.commands.items() if isinstance(command, click.Group) else [("", command)]
        for sub, cmd in subs:
            for param in cmd.params:
                if isinstance(param, click.Option):
                    yield f"{verb} {sub}".strip(), param


OPTIONS = list(options_of_every_verb())


def test_the_container_runtimes_help_names_charliecloud_and_every_other_runtime():
    shown = {p.metavar for _, p in OPTIONS if "--container-runtime" in p.opts}
    assert shown == {"|".join(CONTAINER_RUNTIMES)} and "charliecloud" in CONTAINER_RUNTIMES


@pytest.mark.parametrize("where, param", OPTIONS, ids=[f"{w}:{p.opts[-1]}" for w, p in OPTIONS])
def test_every_choice_list_help_shows_is_the_codes(where, param):
    """A list in the metavar, or one opening the help, belongs to a flag of CHOICES and is
    exactly the code's list, in its order."""
    lists = [m.group(0) for text in (param.metavar or "", param.help or "")
             if (m := _LIST.match(text))]
    flag = next((f for f in param.opts if f in CHOICES), None)
    if flag is None:
        assert lists == [], f"{where} {param.opts}: a choice list not pinned to the code's: add it to CHOICES"
        return
    assert lists == ["|".join(CHOICES[flag])], f"{where} {flag}"


def test_the_role_help_names_every_role_the_code_knows():
    (text,) = {p.help for _, p in OPTIONS if "--role" in p.opts}
    named = re.findall(r"\b([a-z]+)=", text.split(". ")[0]) + re.findall(r"\b([a-z]+)\|", text)
    assert set(named) == set(ROLE_ORDER), text


def test_alloc_names_its_job_as_its_help_says_and_sbatch_after_the_script(cli):
    (alloc_help,) = {p.help for w, p in OPTIONS if w == "alloc" and "--job-name" in p.opts}
    assert alloc_help == f"job name (default: {INTERACTIVE_JOB_NAME})"
    code, out, err = cli("alloc", "--site", "testbed", "--dry-run")
    assert code == 0, err
    assert f"--job-name={INTERACTIVE_JOB_NAME} " in out
    (sbatch_help,) = {p.help for w, p in OPTIONS if w == "sbatch" and "--job-name" in p.opts}
    assert "the script's or module's name" in sbatch_help
    code, out, err = cli("sbatch", "--site", "testbed", "--dry-run", "train.py")
    assert code == 0 and "#SBATCH --job-name=train\n" in out


def test_a_container_image_without_a_runtime_runs_under_pyxis_as_the_help_says(cli):
    (text,) = {p.help for w, p in OPTIONS if w == "sbatch" and "--container-runtime" in p.opts}
    assert text.endswith("else pyxis)")
    code, out, err = cli("sbatch", "--site", "testbed", "--dry-run", "--container-image", "img.sqsh", "train.py")
    assert code == 0, err
    assert "--container-image=img.sqsh" in out.replace("'", "")


def test_sbatchs_help_lists_its_options_in_groups_as_sbatchs_manual_does():
    """Issue 36: ~50 options sat in one flat list."""
    from slurmtorch.cli._common import OTHER, SECTIONS, sections

    assert sections(["help", "wait", "nodes", "site", "odd"]) == [
        ("Where and how big", ["site", "nodes"]), ("Following it", ["wait"]), (OTHER, ["help", "odd"])]
    text = subprocess.run([sys.executable, "-m", "slurmtorch.cli.main", "sbatch", "--help"], capture_output=True,
                          text=True, env=dict(os.environ, COLUMNS="200"), timeout=60).stdout
    heads = [line[:-1] for line in text.splitlines() if line and not line.startswith(" ") and line.endswith(":")]
    assert heads[1:] == [title for title, _ in SECTIONS] + [OTHER], heads
    assert "Options:" not in text
    short = subprocess.run([sys.executable, "-m", "slurmtorch.cli.main", "status", "--help"], capture_output=True,
                           text=True, timeout=60).stdout
    assert "Options:" in short  # a verb with a few options keeps one list
