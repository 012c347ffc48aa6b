"""Reads CLUSTER_SPEC as code written for Vertex AI custom training does: the primary replica in
`workerpool0`, the others in `workerpool1`, one entry per replica (machine), `task` naming this
replica; the reads of a Lightning `VertexAICluster` environment (as published, e.g.
https://cloud.google.com/vertex-ai/docs/training/distributed-training#cluster-spec-format and the
community `VertexAICluster(LightningEnvironment)`: main_address/main_port from workerpool0[0],
node_rank = 0 for workerpool0 else index + 1). Prints one `VERTEX {json}` line per rank, with its
host and TF_CONFIG as a TensorFlow-style reader takes it (KeyError where one is missing)."""

import json
import os
import socket

spec = json.loads(os.environ["CLUSTER_SPEC"])
primary = spec["cluster"]["workerpool0"][0]
task = spec["task"]
node_rank = 0 if task["type"] == "workerpool0" else task["index"] + 1
print("VERTEX " + json.dumps({
    "rank": int(os.environ["RANK"]), "main_address": primary.split(":")[0], "main_port": int(primary.split(":")[1]),
    "node_rank": node_rank, "replicas": sum(len(v) for v in spec["cluster"].values()),
    "environment": spec.get("environment"), "MASTER_ADDR": os.environ["MASTER_ADDR"],
    "MASTER_PORT": int(os.environ["MASTER_PORT"]), "NODE_RANK": int(os.environ["NODE_RANK"]),
    "host": socket.gethostname(), "cluster_spec": spec, "tf_config": json.loads(os.environ["TF_CONFIG"])}),
    flush=True)
