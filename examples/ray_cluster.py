"""A Ray driver for `slurmtorch sbatch --ray`: the cluster is up when this starts, RAY_ADDRESS set.

    slurmtorch sbatch --site testbed --nodes 2 --ray --wait examples/ray_cluster.py

Prints the cluster's CPUs, each node's address (on the site's fabric interface), and where
a few tasks ran.
"""

import socket
from collections import Counter

import ray


@ray.remote(num_cpus=1)
def where() -> str:
    return socket.gethostname()


def main() -> None:
    ray.init()  # RAY_ADDRESS: the head, which slurmtorch started on the first node
    print("CPUs:", ray.cluster_resources().get("CPU"))
    for node in ray.nodes():
        if node["Alive"]:
            print("node", node["NodeManagerHostname"], "at", node["NodeManagerAddress"])
    print("tasks ran on:", dict(Counter(ray.get([where.remote() for _ in range(8)]))))


if __name__ == "__main__":
    main()
