"""Where the world meets: MASTER_ADDR on the site's interface and a free MASTER_PORT.

MASTER_ADDR is rank 0's IPv4 address on the interface the site chose for the node
type (GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME), else the address of its host name.
Clusters often have several networks (management Ethernet, IPoIB, ...); the host name
may resolve to the wrong one, or to 127.0.1.1 on Debian-style /etc/hosts.

MASTER_PORT: rank 0 binds port 0 with SO_REUSEADDR and *keeps the socket open* (bound,
not listening) until torch's TCPStore has bound the same port. c10d binds its listening
socket with SO_REUSEADDR too, which Linux allows next to a bound, non-listening one.
While we hold it, the kernel never hands the port out for a port-0 bind and a plain bind
of it fails, so nothing that picks a free port (most servers, other jobs' rank 0) can
take it. It is not exclusive: another process that binds the same explicit port with
SO_REUSEADDR (say a second job given the same MASTER_PORT) succeeds too, and the clash
shows only at listen(): the second listener (or a bind after the first listen()) gets
EADDRINUSE, which torch reports as a store error.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import random
import socket
import struct
import sys
import time
from collections.abc import Mapping, Sequence

from slurmtorch import protocol
from slurmtorch.errors import BootstrapError

_SIOCGIFADDR = 0x8915  # <linux/sockios.h>: get an interface's IPv4 address


def ifname_spec(env: Mapping[str, str], backend: str = "gloo") -> str | None:
    """The interface setting that applies: the backend's own variable first."""
    order = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME") if backend == "nccl" else \
        ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
    for key in order:
        value = env.get(key, "").strip()
        if value:
            return value
    return None


def pick_interface(spec: str, available: Sequence[str]) -> str | None:
    """The interface a *_SOCKET_IFNAME value names, following NCCL's syntax.

    `eth0,ib0`: the first entry present (gloo takes the first; NCCL treats entries as
    prefixes, so `eth` matches eth0). `=eth0`: exact names only. `^docker,lo`: any
    interface except those prefixes; `^=docker0`: except exactly those names. Loopback
    only when nothing else is left. Returns None when nothing matches.
    """
    spec = spec.strip()
    if spec.startswith("^"):
        rest = spec[1:].strip()
        exact = rest.startswith("=")
        excluded = [p.strip() for p in rest.lstrip("=").split(",") if p.strip()]
        candidates = [n for n in available
                      if not any(n == p if exact else n.startswith(p) for p in excluded)]
        non_lo = [n for n in candidates if n != "lo"]
        left = non_lo or candidates
        return left[0] if left else None
    exact = spec.startswith("=")
    names = [p.strip() for p in spec.lstrip("=").split(",") if p.strip()]
    for name in names:
        if name in available:
            return name
    if not exact:
        for name in names:
            for n in available:
                if n.startswith(name):
                    return n
    return None


def interface_address(name: str) -> str | None:
    """IPv4 address of a local interface (SIOCGIFADDR), or None if it has none."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
    except OSError:
        return None
    finally:
        s.close()
    return socket.inet_ntoa(packed[20:24])


def host_address(hostname: str) -> str:
    """IPv4 address of a host name, through the resolver (/etc/hosts, DNS)."""
    try:
        return socket.gethostbyname(hostname)
    except OSError as exc:
        raise BootstrapError(f"cannot resolve this host's name {hostname!r}: {exc}",
                             tip="set GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME to the interface to use") from None


def site_address(env: Mapping[str, str], hostname: str, backend: str = "gloo") -> str | None:
    """This host's IPv4 address on the fabric the site chose, or None without such a setting:
    the address of its fabric name (the site's `fabric_host_suffix`, JSC's `i`: Slurm's name
    for this node + `i`, as JSC's course scripts write MASTER_ADDR="${MASTER_ADDR}i"), else the
    one on the interface of *_SOCKET_IFNAME; a setting that gives no address is an error."""
    suffix = env.get(protocol.FABRIC_HOST_SUFFIX, "").strip()
    if suffix:
        name = (env.get("SLURMD_NODENAME", "").strip() or hostname.split(".", 1)[0]) + suffix
        try:
            return host_address(name)
        except BootstrapError as exc:
            raise BootstrapError(exc.message, tip="fix fabric_host_suffix in the site config for this node "
                                                  f"type ({protocol.FABRIC_HOST_SUFFIX}={suffix})") from None
    spec = ifname_spec(env, backend)
    if not spec:
        return None
    available = [name for _, name in socket.if_nameindex()]
    picked = pick_interface(spec, available)
    address = interface_address(picked) if picked else None
    if not address:
        raise BootstrapError(
            f"no IPv4 address on the interface {spec!r} on {hostname} (interfaces: {', '.join(available)})",
            tip="fix GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME in the site config for this node type",
        )
    return address


def master_address(env: Mapping[str, str], hostname: str, backend: str = "gloo") -> str:
    """The address rank 0 publishes as MASTER_ADDR (called on rank 0 only)."""
    if env.get("MASTER_ADDR", "").strip():
        return env["MASTER_ADDR"].strip()
    return site_address(env, hostname, backend) or host_address(hostname)


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def check_reachable(address: str, num_nodes: int) -> None:
    """A loopback MASTER_ADDR cannot work across nodes: say so before a 10-minute hang."""
    if num_nodes > 1 and is_loopback(address):
        raise BootstrapError(
            f"MASTER_ADDR {address} is a loopback address but the job spans {num_nodes} nodes",
            tip="set GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME (e.g. eth0), or fix /etc/hosts "
                "(the host name resolves to 127.x)",
        )


class PortReservation:
    """A bound (not listening) SO_REUSEADDR socket that keeps the kernel and plain binds off
    a port until closed (not other SO_REUSEADDR binds of it: see the module docstring)."""

    def __init__(self, port: int = 0, host: str = ""):
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((host, port))
        except OSError as exc:
            self._sock.close()
            raise BootstrapError(f"MASTER_PORT {port} is not free on {os.uname().nodename}: {exc}",
                                 tip="set MASTER_PORT to a free port, or unset it to pick one") from None
        self.port: int = self._sock.getsockname()[1]

    def close(self) -> None:
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def reserve_port(port: int = 0) -> PortReservation:
    """Bind `port` (0: a free one chosen by the kernel) and hold it."""
    return PortReservation(port)


def wait_listening(address: str, port: int, timeout: float, poll_s: float = 0.005) -> bool:
    """Wait until something accepts connections at address:port; False after `timeout` s.

    A rank that is not rank 0 calls this before torch's TCPStore client connects. Until
    rank 0 has imported torch and its store listens, the port is held but not listening,
    and torch's client retries with a growing back-off (measured on torch 2.13: a store
    that came up 0.7 s late was reached 1.3 s in), so every rank whose `import torch` beat
    rank 0's waited up to half a second more. A refused connect costs microseconds: polling
    every 5 ms reaches the store within a few ms of it listening. The probe connection is
    closed before any byte is sent, which the store's server takes as a client that left.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((address, port), timeout=max(0.1, min(5.0, timeout))):
                return True
        except OSError:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)


def free_port(port_range: str = "/proc/sys/net/ipv4/ip_local_port_range") -> int:
    """A port free on this host now, at random below the kernel's ephemeral range.

    For a batch script that picks MASTER_PORT before rank 0 starts, so nothing holds it in
    between: a port from the ephemeral range (a port-0 bind) can be taken by any outgoing
    connection in the seconds before rank 0 binds it again, and hashing the job id would
    let two jobs collide. Only when ten random picks are all taken does port 0 decide.
    """
    try:
        with open(port_range) as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for port in random.sample(range(20000, low if low > 21000 else 32768), 10):
        if _bind_probe(port):
            return port
    got = _bind_probe(0)
    assert got is not None  # a port-0 bind that fails raises
    return got


def _bind_probe(port: int) -> int | None:
    """Bind `port` (0: the kernel picks) with a plain bind and let go: the port it got, or None
    when it is taken (a port-0 bind that fails raises)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("", port))
        return s.getsockname()[1]
    except OSError:
        if not port:
            raise
        return None
    finally:
        s.close()


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m slurmtorch.bootstrap.rendezvous [--backend B | --port]`: print this host's
    MASTER_ADDR, or with `--port` a free MASTER_PORT (`free_port`).

    Only batch scripts rendered before issue 45 run it (a job queued across an upgrade): a
    batch script and the restart supervisor now pick both with the batch node's bash
    (templates/rendezvous.sh), which runs where no python of ours does (a container job's
    nodes). The rank side keeps these functions: MPI's rank 0 and a Ray node find their own.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    backend = "gloo"
    if args == ["--port"]:
        print(free_port())
        return 0
    if args[:1] == ["--backend"] and len(args) == 2:
        backend = args[1]
    elif args:
        sys.stderr.write("usage: python -m slurmtorch.bootstrap.rendezvous"
                         " [--backend auto|nccl|gloo|mpi | --port]\n")
        return 2
    try:
        address = master_address(os.environ, os.uname().nodename, backend)
    except BootstrapError as exc:
        sys.stderr.write("".join(f"slurmtorch: {line}\n" for line in exc.render().splitlines()))
        return 1
    print(address)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def split_address(head: str) -> tuple[str, int]:
    """HOST:PORT (a Ray head's, as the batch script names it) -> (the host's IPv4 address, port)."""
    host, _, port = head.rpartition(":")
    if not host or not port.isdigit():
        raise BootstrapError(f"the Ray head's address {head!r} is not HOST:PORT")
    return host_address(host), int(port)
