"""A Lightning Trainer script as its users write it, preempted mid-fit:
`lightning_preempt.py ROOT [SIGNAL_AT [STEP_S [MAX_STEPS]]]`.

Lightning's SLURMEnvironment (auto_requeue on by default) sets its own SIGUSR1 handler, which
saves `ROOT/hpc_ckpt_N.ckpt` and runs `scontrol requeue`. At step SIGNAL_AT (3; -1: never) a
callback sends this process SIGUSR1 (what `scancel --signal=USR1` or `--signal USR1@60` do);
the fit carries on to MAX_STEPS (8), STEP_S seconds a step (0). A requeued run
(SLURM_RESTART_COUNT > 0) resumes from Lightning's hpc checkpoint itself
(`ckpt_path="hpc"`). Prints `LIGHTNING ...` lines for the test to read.
"""
import os
import signal
import sys
import time

import torch
import lightning.pytorch as pl

root = sys.argv[1]
signal_at = int(sys.argv[2]) if len(sys.argv) > 2 else 3
step_s = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
max_steps = int(sys.argv[4]) if len(sys.argv) > 4 else 8


class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, _):
        return self.layer(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Preempt(pl.Callback):
    def on_train_batch_end(self, trainer, *_):
        print(f"LIGHTNING step {trainer.global_step}", flush=True)
        time.sleep(step_s)
        if trainer.global_step == signal_at:
            print(f"LIGHTNING signalling at step {trainer.global_step}", flush=True)
            os.kill(os.getpid(), signal.SIGUSR1)


data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 4)), batch_size=4)
trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=max_steps, default_root_dir=root, logger=False,
                     enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                     callbacks=[Preempt()])
print(f"LIGHTNING cluster_env {type(trainer._accelerator_connector.cluster_environment).__name__}", flush=True)
trainer.fit(Tiny(), data, ckpt_path="hpc" if os.environ.get("SLURM_RESTART_COUNT", "0") != "0" else None)
print(f"LIGHTNING done step {trainer.global_step} files {sorted(os.listdir(root))}", flush=True)
