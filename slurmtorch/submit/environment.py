"""The job's environment: the layers in their order, and the user's `--env` checked.

Fabric (what the node type's network implies), then the site's `env`, the node
type's own `env` (the admin's last word for that hardware), the preset's, and the
user's `--env`; a null in a YAML layer removes the variable. Names the batch script
sets itself are refused from `--env`.
"""

from __future__ import annotations

from slurmtorch import shell
from slurmtorch.errors import SpecError
from slurmtorch.submit.cluster import NodeType, Site
from slurmtorch.submit.options import Options

# Variables the batch script sets itself. An --env value for one would be overwritten
# or, worse, win: SLURM_EXPORT_ENV=NONE strips every srun step's environment, and a
# MASTER_ADDR/PORT typed on the submitting host sends the ranks to the wrong rendezvous.
SCRIPT_ENV = frozenset({
    "MASTER_ADDR", "MASTER_PORT", "SLURM_EXPORT_ENV", "SLURMTORCH_JOB_DIR", "SLURMTORCH_PARAMS",
    "SLURMTORCH_PREEMPT_REQUEUE", "SLURMTORCH_PREEMPT_SIGNAL", "SLURMTORCH_ROLES", "SLURMTORCH_STARTED",
    "SLURMTORCH_TRIAL",
})
SCRIPT_ENV_PREFIX = "SLURMTORCH_SWEEP_"


def job_env(site: Site, node: NodeType, preset: dict, o: Options) -> dict[str, str]:
    """Every layer applied in order; insertion order is the order the script exports them."""
    env: dict[str, str] = dict(node.network_env())
    env.update(site.env)
    for key, value in (*node.env, *preset.get("env", ())):
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    env.update(parse_env(o.env, batch=o.kind == "sbatch"))
    return env


def parse_env(items: tuple[str, ...] | list[str], batch: bool = False) -> list[tuple[str, str]]:
    """`K=V` strings -> pairs; the name must be a plain shell name.

    With `batch`, names the batch script sets itself (SCRIPT_ENV) are refused.
    """
    out = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise SpecError(f"malformed --env {item!r}: expected NAME=VALUE", tip="e.g. --env NCCL_DEBUG=INFO")
        shell.env_name(name)
        if batch and (name in SCRIPT_ENV or name.startswith(SCRIPT_ENV_PREFIX)):
            raise SpecError(
                f"--env {name}: the batch script sets {name} itself",
                tip="a site that needs a fixed one sets it in its `env:`" if name.startswith("MASTER_")
                else f"leave --env {name} out; slurmtorch sets it for every job that needs it",
            )
        shell.quote(value, what=f"--env {name} value")  # refuses NUL and non-UTF-8 text
        out.append((name, value))
    return out
