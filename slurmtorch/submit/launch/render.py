"""Render a `JobSpec` into the batch (or mpirun) script: pure, deterministic, no torch.

Templates live in `templates/` (a site may override any of them with its
`templates:` folder). Every value reaches the text through one of three filters:
`q` (shell.quote), `directive` (shell.directive_value) or `comment` (for the
provenance line); StrictUndefined turns a typo in a template into an error.
"""

from __future__ import annotations

import os
import traceback
from functools import lru_cache

import jinja2

from slurmtorch import protocol, resources
from slurmtorch import shell
from slurmtorch.errors import SlurmtorchError, TemplateError
from slurmtorch.submit.launch.containers import EDF_END, EDF_FILE
from slurmtorch.submit.jobfolder import ownership
from slurmtorch.submit.launch.launchplan import charliecloud_env, edf, het_headers, plan, trial_cases
from slurmtorch.submit.launch.scripttext import comment_quote, composed_path, script_join, script_quote
from slurmtorch.submit.launch.spec import JobSpec

# A launcher's variables that sbatch (--export=ALL) brings along from the submitting
# shell, e.g. after a local torchrun: the batch script unsets them, since they would
# describe another world than the job's (a stale MASTER_ADDR wins over the first node).
INHERITED_WORLD = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                   "ROLE_RANK", "ROLE_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
                   "TORCHELASTIC_RUN_ID", "CLUSTER_SPEC", "TF_CONFIG")


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """Compiled templates, kept between CLI runs: compiling ours costs ~6 ms a run.

    In our private cache folder ($XDG_CACHE_HOME/slurmtorch/templates), not Jinja's
    default /tmp/_jinja2-cache-UID: a predictable /tmp name another user can make first
    (Jinja then refuses it, but chmods it before looking, following a planted link).
    Each entry is checked against its template's source, so an edited or site-overridden
    template is recompiled. SLURMTORCH_NO_TEMPLATE_CACHE=1 turns it off.
    """
    if os.environ.get("SLURMTORCH_NO_TEMPLATE_CACHE"):
        return None
    where = ownership.cache_folder("templates")
    return None if where is None else jinja2.FileSystemBytecodeCache(str(where))


@lru_cache(maxsize=8)
def environment(site_templates: str | None = None) -> jinja2.Environment:
    """The one Jinja2 environment: site overrides first, then the bundled templates."""
    loaders = []
    if site_templates:
        loaders.append(jinja2.FileSystemLoader(site_templates))
    loaders.append(jinja2.FileSystemLoader(str(resources.templates_dir())))
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        bytecode_cache=_bytecode_cache(),
    )
    env.filters["q"] = script_quote
    env.filters["join_q"] = script_join
    env.filters["directive"] = shell.directive_value
    env.filters["envname"] = shell.env_name
    env.filters["comment"] = comment_quote
    env.filters["composed_path"] = composed_path
    env.globals["shell_file"] = lambda name: _shell_file(env, name)
    return env


_SHELL_FILES: dict[tuple[int, str], str] = {}


def _shell_file(env: jinja2.Environment, name: str) -> str:
    """A shell file of `templates/` (the batch node's bash, which shellcheck reads as it is), as
    the script includes it: its text, less the shellcheck directive of its first line."""
    key = (id(env), name)
    if key not in _SHELL_FILES:
        assert env.loader is not None
        text = env.loader.get_source(env, name)[0]
        _SHELL_FILES[key] = text.removeprefix("# shellcheck shell=bash\n").rstrip("\n")
    return _SHELL_FILES[key]


def shell_files(spec: JobSpec) -> tuple[tuple[str, str], ...]:
    """The shell files of `templates/` (a site's own first) that the job's script sources from its
    folder (`protocol.SHELL_DIR`, written at submission with the script): the one copy that
    job runs, whatever is installed on its nodes or inside its image later (pure). Their names
    as `SHELL_FILES` says; () for a script that sources none (`slurmtorch mpirun`'s)."""
    if spec.kind != "sbatch":
        return ()
    launch = plan(spec)
    # record.sh: each start and end of the script in the job's record. The restart supervisor picks each
    # start's port and address with rendezvous.sh (supervisor._rendezvous).
    names = [name for name, wanted in (("record.sh", True),
                                       ("rendezvous.sh", launch.pick_port or launch.pick_addr or bool(launch.supervisor)),
                                       ("chenv.sh", bool(charliecloud_env(spec))),
                                       ("reap.sh", launch.background)) if wanted]
    env = environment(spec.templates)
    return tuple((name, _shell_file(env, name) + "\n") for name in names)


def header_lines(spec: JobSpec) -> tuple[str, ...]:
    """The `#SBATCH` lines, sorted, then each later component's of a heterogeneous job after `#SBATCH hetjob`."""
    return (*spec.sbatch_lines, *(line for lines in het_headers(spec) for line in ("#SBATCH hetjob", *lines)))


def module_lines(spec: JobSpec) -> tuple[tuple[str, ...], ...]:
    """`module purge`, `module use PATH`, `module load NAME` as the job's setup runs them, unquoted."""
    return (*((("module", "purge"),) if spec.module_purge else ()), *(("module", "use", p) for p in spec.module_use),
            *(("module", "load", name) for name in spec.modules))


def render_template(name: str, spec: JobSpec, **extra: object) -> str:
    """Template `name` with the spec, its launch (launchplan.plan) and `extra` values."""
    # Outside the net below: a bug here is ours, not a template's.
    facts = dict(launch=plan(spec), trials=trial_cases(spec), header=header_lines(spec), edf=edf(spec),
                 chenv=charliecloud_env(spec), modules=module_lines(spec))
    try:
        template = environment(spec.templates).get_template(name)
        return template.render(spec=spec, **facts, inherited_world=INHERITED_WORLD, edf_file=EDF_FILE,
                               edf_end=EDF_END, code_dir=protocol.CODE_DIR, role_nodes_file=protocol.ROLE_NODES_FILE,
                               supervisor_end=protocol.SUPERVISOR_END, supervisor_killed=protocol.SUPERVISOR_KILLED,
                               sourced=bool(shell_files(spec)), shell_dir=protocol.SHELL_DIR, **extra)
    except SlurmtorchError:
        raise
    except jinja2.TemplateNotFound as e:
        raise TemplateError(f"template {e.name!r} not found", tip="check the site's `templates:` folder") from None
    except jinja2.TemplateSyntaxError as e:
        raise TemplateError(f"{e.filename or e.name}:{e.lineno}: template syntax error: {e.message}") from None
    except jinja2.UndefinedError as e:
        raise TemplateError(f"template {name!r}: {e.message}") from None
    except Exception as e:  # noqa: BLE001 - a site's template can raise anything while rendering
        where = _template_line(e) or f"template {name!r}"
        detail = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise TemplateError(f"{where}: error while rendering: {type(e).__name__}{': ' + detail if detail else ''}",
                            tip="check the site's `templates:` folder") from None


def _template_line(exc: BaseException) -> str | None:
    """`file:line` of the innermost template frame (Jinja maps its frames to template lines)."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename.endswith(".j2"):
            return f"{frame.filename}:{frame.lineno}"
    return None


def render_sbatch(spec: JobSpec) -> str:
    """The batch script `sbatch` receives, byte for byte."""
    return render_template("sbatch.sh.j2", spec)


def render_mpirun(spec: JobSpec) -> str:
    """A script that runs the job with mpirun on hosts without Slurm."""
    return render_template("mpirun.sh.j2", spec)


def render(spec: JobSpec) -> str:
    return render_sbatch(spec) if spec.kind == "sbatch" else render_mpirun(spec)
