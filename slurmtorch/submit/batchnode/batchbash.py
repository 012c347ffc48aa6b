"""The bash of ours that a batch script runs on the job's first node, as text the template prints.

Three small programs have to run there in bash, not in a python of ours: a container job's
nodes need not have the submitting host's python, and a role job's steps are children of
the batch shell. They live here rather than inside the template, which then reads as the
script (a flag decides whether each is printed); tests run them in a real bash.
"""

from __future__ import annotations

import re

from slurmtorch import shell
from slurmtorch.submit.containers import CHARLIECLOUD_ENV

# MASTER_PORT for a job whose ranks run in a container: the rendezvous module of the
# host's python is not there to ask (`python -m slurmtorch.bootstrap.rendezvous --port`).
PICK_PORT = """\
# Rank 0 runs on this node, the first of the allocation: take a port that no socket here
# uses now (/proc/net/tcp*, in hex), at random below the kernel's ephemeral range. In bash:
# the ranks' python is the image's, and nothing of the submitting host's runs in the job.
read -r ephemeral _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null && [ "$ephemeral" -gt 21000 ] || ephemeral=32768
MASTER_PORT=
for _ in $(seq 100); do
    port=$((20000 + RANDOM % (ephemeral - 20000)))
    grep -qi ":$(printf '%04X' "$port") " /proc/net/tcp /proc/net/tcp6 2>/dev/null || { MASTER_PORT=$port; break; }
done
if [ -z "$MASTER_PORT" ]; then
    echo "slurmtorch: error: no free port for MASTER_PORT on $(hostname)" >&2
    printf '%s\\n' 1 >"$SLURMTORCH_JOB_DIR/exit-code"
    exit 1
fi
export MASTER_PORT"""


# A site with a fabric host suffix (JSC: `i`): MASTER_ADDR is this node's fabric name's
# address, as JSC's course scripts take it (`MASTER_ADDR="${MASTER_ADDR}i"`, then its address).
PICK_FABRIC_ADDR = """\
# MASTER_ADDR: the address of this node's name on the fabric (its Slurm name + the site's
# suffix; JSC: jwb0001 -> jwb0001i), which the ranks' sockets use; the host name resolves to
# another network. In bash: nothing of the submitting host's python runs in the job.
read -r MASTER_ADDR _ < <(getent ahostsv4 "${SLURMD_NODENAME:-$(hostname -s)}$SLURMTORCH_FABRIC_HOST_SUFFIX")
if [ -z "$MASTER_ADDR" ]; then
    printf 'slurmtorch: error: cannot resolve %s (fix fabric_host_suffix in the site config for this node type)\\n' "${SLURMD_NODENAME:-$(hostname -s)}$SLURMTORCH_FABRIC_HOST_SUFFIX" >&2
    printf '%s\\n' 1 >"$SLURMTORCH_JOB_DIR/exit-code"
    exit 1
fi
export MASTER_ADDR"""


def pick_addr(backend: str, fabric_host: bool = False) -> str:
    """MASTER_ADDR for a job whose ranks run in a container, as text for the batch script:
    this node's IPv4 address on the interface the site chose (*_SOCKET_IFNAME; the backend's
    own variable first, as rendezvous.ifname_spec), read with iproute2's `ip` on the host.
    Covers what fabric_env writes (comma-separated exact names, NCCL's leading `=`); NCCL's
    prefix matching and `^` exclusions are left to the ranks' host name. With `fabric_host`
    (the site's fabric_host_suffix), the address of the node's fabric name instead."""
    if fabric_host:
        return PICK_FABRIC_ADDR
    first, second = ("NCCL", "GLOO") if backend == "nccl" else ("GLOO", "NCCL")
    return f"""\
# MASTER_ADDR: this node's address on the interface the site chose for the node type
# (*_SOCKET_IFNAME), which the ranks' sockets use; the host name may resolve to another
# network (the management network, where the site's interface is the fabric). In bash, as
# the port: read with `ip` on this host. Without such a setting the ranks use the host name.
ifnames=${{{first}_SOCKET_IFNAME:-${{{second}_SOCKET_IFNAME:-}}}}
if [ -n "$ifnames" ] && [ "${{ifnames#^}}" = "$ifnames" ]; then
    IFS=, read -ra names <<<"${{ifnames#=}}"
    MASTER_ADDR=
    for name in "${{names[@]}}"; do
        read -r _ _ _ MASTER_ADDR _ < <(ip -4 -o addr show dev "$name" 2>/dev/null)
        MASTER_ADDR=${{MASTER_ADDR%/*}}
        [ -z "$MASTER_ADDR" ] || break
    done
    if [ -z "$MASTER_ADDR" ]; then
        printf 'slurmtorch: error: no IPv4 address on the interface %s on %s (fix GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME in the site config for this node type)\\n' "$ifnames" "$(hostname)" >&2
        printf '%s\\n' 1 >"$SLURMTORCH_JOB_DIR/exit-code"
        exit 1
    fi
    export MASTER_ADDR
fi"""


def charliecloud_env(names: list[str]) -> str:
    """The job's variables as ch-run's --set-env file (containers.CHARLIECLOUD_ENV), written by
    the batch script once the site's environment is exported: ch-run reads it after the
    image's /ch/environment, so the site's values win where the image sets the same names.
    ch-run(1)'s syntax: NAME=VALUE a line, single quotes around VALUE stripped (so a value
    keeps its own quotes); a newline cannot be carried and ends the job with one line. Names
    that are unset here stay the image's. Also $USER, which ch-run will not start without."""
    for name in names:
        shell.env_name(name)
    return f"""\
# The ranks run under ch-run: it applies the image's environment where the site asks
# (--set-env), then this file, so the job's variables keep the values exported above.
export USER="${{USER:-$(id -un)}}"
for name in {" ".join(names)}; do
    [ -n "${{!name+set}}" ] || continue
    case ${{!name}} in
    *$'\\n'*)
        printf 'slurmtorch: error: %s holds a newline, which ch-run --set-env cannot carry\\n' "$name" >&2
        printf '%s\\n' 1 >"$SLURMTORCH_JOB_DIR/exit-code"
        exit 1
        ;;
    esac
    printf "%s='%s'\\n" "$name" "${{!name}}"
done >"$SLURMTORCH_JOB_DIR/{CHARLIECLOUD_ENV}\""""


# A heterogeneous role job's nodes in its folder, job rank R's on line R+1: srun numbers each
# role's tasks from 0, so the failure report places srun's lines by host (failures.parse_failures).
ROLE_NODES_FILE = "role-nodes"
# The reaper's line below when a role's step fails first; what srun then says of the other
# roles' tasks (Killed, Terminated) is the stop, not a failure of their own.
ROLE_STOPPED_RE = re.compile(r"^slurmtorch: role (?P<role>\w+) exited with (?P<code>\d+); stopping the other roles$")

# After a role job's steps started in the background (each `role[$!]=NAME`, and
# `training[$!]=1` for a training role's), wait for them; `$?` is then the job's code.
REAP_ROLE_STEPS = """\
# Steps are reaped as they end (`wait -n`, bash 4.3+); role[] and training[] are indexed
# by srun's pid. The first step that fails stops the others at once (srun passes the TERM
# on to its tasks): a dead worker would otherwise leave the master blocked in a collective
# until the process-group timeout. Parameter servers (and an evaluator) serve until every
# training role has ended.
rc=0
while [ "$rc" -eq 0 ] && [ -n "${training[*]}" ]; do
    wait -n
    for pid in "${!role[@]}"; do
        kill -0 "$pid" 2>/dev/null && continue
        wait "$pid"
        code=$?
        if [ "$code" -ne 0 ] && [ "$rc" -eq 0 ]; then
            rc=$code
            printf 'slurmtorch: role %s exited with %s; stopping the other roles\\n' "${role[pid]}" "$rc" >&2
        fi
        unset 'role[pid]' 'training[pid]'
    done
done
# A task that ignores TERM must not hold the job: once the grace time is up, srun itself
# is killed, and the end of the job takes its step down.
if [ -n "${role[*]}" ]; then
    kill "${!role[@]}" 2>/dev/null
    grace=30
    while [ "$grace" -gt 0 ] && kill -0 "${!role[@]}" 2>/dev/null; do
        sleep 1
        grace=$((grace - 1))
    done
    kill -KILL "${!role[@]}" 2>/dev/null
    wait
fi
(exit "$rc")"""
