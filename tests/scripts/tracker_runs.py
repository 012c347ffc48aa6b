"""What the trackers recorded of one run under OUT, as JSON: `tracker_runs.py OUT RUN_ID`.

Read back with each tracker's own reader (run by .venv-trackers' python, which has them):
wandb's offline folders of RUN_ID, in the order they ran, each with the run id its records
carry and the steps it logged; MLflow's runs in the file store with their tag and the steps of
`loss`; TensorBoard's log folders and the steps of `loss` in RUN_ID's.
"""
import json
import os
import struct
import sys
from pathlib import Path

import mlflow
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from wandb.proto import wandb_internal_pb2

out, run_id = Path(sys.argv[1]), sys.argv[2]
BLOCK = 32768


def wandb_records(path: Path):
    """A .wandb file's records: W&B's transaction log, a 7-byte header then LevelDB's log
    format (32 KiB blocks of chunks: crc32c, length, type 1 full | 2 first | 3 middle | 4 last)."""
    data, pos, parts = path.read_bytes(), 7, []
    assert data[:4] == b":W&B", path
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:
            pos += BLOCK - pos % BLOCK  # a block's zero-filled trailer
            continue
        _, length, kind = struct.unpack_from("<IHB", data, pos)
        parts.append(data[pos + 7:pos + 7 + length])
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(parts))
            parts = []
            yield record


def wandb_starts() -> list[dict]:
    starts = []
    for path in sorted(out.glob(f"wandb/offline-run-*-{run_id}/run-{run_id}.wandb")):
        ids, steps = [], []
        for record in wandb_records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                ids.append(record.run.run_id)
            elif kind == "history":
                steps.append(record.history.step.num)
        starts.append({"ids": ids, "steps": steps})
    return starts


def mlflow_runs() -> list[dict]:
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # MLflow 3 asks for a database unless told
    mlflow.set_tracking_uri(f"file:{out}/mlruns")
    client = mlflow.tracking.MlflowClient()
    return [{"id": run.info.run_id, "tag": run.data.tags.get("slurmtorch.run_id"),
             "steps": sorted(m.step for m in client.get_metric_history(run.info.run_id, "loss"))}
            for run in mlflow.search_runs(search_all_experiments=True, output_format="list")]


def tensorboard_run() -> dict:
    events = EventAccumulator(str(out / "tensorboard" / run_id))
    events.Reload()
    return {"folders": sorted(p.name for p in (out / "tensorboard").iterdir()),
            "steps": [e.step for e in events.Scalars("loss")]}


print(json.dumps({"wandb": wandb_starts(), "mlflow": mlflow_runs(), "tensorboard": tensorboard_run()}))
