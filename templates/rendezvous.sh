# shellcheck shell=bash
# Where the ranks meet rank 0, picked on its node. MASTER_PORT: free there now, at random below the kernel's
# ephemeral range (from which a connection may take a port before rank 0 binds it). MASTER_ADDR: its IPv4
# address on the site's fabric, its fabric name's (fabric_host_suffix) or on the interface *_SOCKET_IFNAME
# names in NCCL's syntax (names, then prefixes; =names only; ^all but these, loopback last); neither: none,
# and the ranks meet at the host name, which may resolve to the management network.
free_port() {
    local low port
    read -r low _ </proc/sys/net/ipv4/ip_local_port_range && [ "$low" -gt 21000 ] || low=32768
    for port in $(shuf -i "20000-$((low - 1))" -n 100); do
        grep -qi ":$(printf %04X "$port") " /proc/net/tcp /proc/net/tcp6 2>/dev/null || { echo "$port"; return; }
    done
    echo "slurmtorch: error: no free port for MASTER_PORT on $(hostname)" >&2
    return 1
}
fabric_address() {  # $1: the torch backend, whose own *_SOCKET_IFNAME is read first
    local host=${SLURMD_NODENAME:-$(hostname -s)} want=${GLOO_SOCKET_IFNAME:-${NCCL_SOCKET_IFNAME:-}}
    [ "$1" != nccl ] || want=${NCCL_SOCKET_IFNAME:-${GLOO_SOCKET_IFNAME:-}}
    if [ -n "${SLURMTORCH_FABRIC_HOST_SUFFIX:-}" ]; then
        getent ahostsv4 "$host$SLURMTORCH_FABRIC_HOST_SUFFIX" | awk '{ print $1; exit }' | grep . && return
        want="cannot resolve $host$SLURMTORCH_FABRIC_HOST_SUFFIX (fix fabric_host_suffix"
    elif [ -n "$want" ]; then
        # Each interface with an IPv4 address, ranked: an exact name by its place in the list, then a prefix.
        ip -o -4 addr show | awk -v want="${want// /}" '
            BEGIN { no = sub(/^\^/, "", want); eq = sub(/^=/, "", want); k = split(want, w, ",") }
            { for (j = 1; j <= k && $2 != w[j] && (eq || index($2, w[j]) != 1); j++) {}
              r = no ? (j > k) * (1 + ($2 == "lo")) : (j > k) ? 0 : ($2 == w[j]) ? j : k + j
              if (r && (!best || r < best)) { best = r; sub(/\/.*/, "", $4); addr = $4 } }
            END { if (addr) print addr; else exit 1 }' && return
        want="no IPv4 address on the interface $want on $(hostname) (fix GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME"
    else
        return 0
    fi
    echo "slurmtorch: error: $want in the site config for this node type)" >&2
    return 1
}
