"""torchrun's agent on one node of a Slurm job, told what torch cannot find out itself.

The batch script starts one agent per node (`srun --ntasks-per-node=1 python -m
slurmtorch.bootstrap.agent --backend B <torchrun's options> -m slurmtorch.bootstrap ...`);
this adds two of torchrun's own options and runs `torch.distributed.run` as `python -m`
would. On real clusters a node's host name resolves to the management network while the
ranks must meet on the fabric (IPoIB `ib0`, the site's interface), and torch decides both
things below from the host name:

- `--rdzv-conf is_host=1` on the job's first node (SLURM_NODEID 0, where the batch script
  took MASTER_ADDR:MASTER_PORT for `--rdzv-endpoint`), `is_host=0` on the others. Without
  it torch starts the rendezvous store only where the endpoint's address is one the host
  name resolves to: none, when the endpoint is on the fabric, and every agent fails after a
  minute with RendezvousConnectionError. JSC documents this failure and passes the same
  flag: https://github.com/pytorch/pytorch/issues/73656, their `torchrun_jsc`
  (https://github.com/HelmholtzAI-FZJ/torchrun_jsc, "How does it work?": it patches
  `--rdzv_conf`'s `is_host` from SLURM_NODEID and `--local_addr`), and their courses'
  `--rdzv_conf=is_host=$((SLURM_NODEID==0))`.
- `--local-addr ADDR`, this node's address on the site's interface (*_SOCKET_IFNAME): the
  agent that becomes rendezvous rank 0 gives it to the workers as MASTER_ADDR and hosts
  their store there; without it torch takes the node's FQDN, the management network.

An option the command line already has is left as it is.
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Mapping, Sequence

from slurmtorch.bootstrap import rendezvous
from slurmtorch.errors import BootstrapError

USAGE = "usage: python -m slurmtorch.bootstrap.agent --backend BACKEND TORCHRUN_ARGS..."


def has_option(argv: Sequence[str], *names: str) -> bool:
    """Whether torchrun's own options include one of `names`: those before `-m`, after which
    come the worker's module and its arguments (the rendered line always runs the bootstrap
    with -m)."""
    for arg in argv:
        if arg in ("-m", "--module"):
            return False
        if arg.split("=", 1)[0] in names:
            return True
    return False


def agent_options(argv: Sequence[str], env: Mapping[str, str], local_addr: str | None) -> list[str]:
    """The options this node's agent adds before torchrun's own (pure)."""
    extra: list[str] = []
    if not has_option(argv, "--rdzv-conf", "--rdzv_conf"):
        node = env.get("SLURM_NODEID", "").strip()
        extra += ["--rdzv-conf", f"is_host={int(node == '0')}"]
    if local_addr and not has_option(argv, "--local-addr", "--local_addr"):
        extra += ["--local-addr", local_addr]
    return extra


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[0] != "--backend":
        sys.stderr.write(USAGE + "\n")
        return 2
    backend, torchrun_args = args[1], args[2:]
    try:
        local_addr = rendezvous.site_address(os.environ, os.uname().nodename, backend)
    except BootstrapError as exc:
        sys.stderr.write("".join(f"slurmtorch: {line}\n" for line in exc.render().splitlines()))
        return 1
    sys.argv = ["torchrun", *agent_options(torchrun_args, os.environ, local_addr), *torchrun_args]
    runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
