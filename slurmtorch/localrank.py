"""`--local_rank N` in argv, the way older launchers told a script its local rank.

torch.distributed.launch (`--local-rank=N` since torch 2.0, `--local_rank=N` before) and
DeepSpeed's launcher (`--local_rank=N`) put it right after the script, before the script's
own arguments, and scripts written for them (DeepSpeed's examples) parse it. With
`--local-rank-arg` the bootstrap does the same; one owner for both sides.
"""

from __future__ import annotations

# The spelling of the flag, as the option's value: DeepSpeed's (and torch's before 2.0) first.
LOCAL_RANK_FORMS = ("local_rank", "local-rank")


def local_rank_arg(form: str, local_rank: int) -> str:
    """Pure: the argument a launcher of that `form` appends, e.g. `--local_rank=3`."""
    if form not in LOCAL_RANK_FORMS:
        raise ValueError(f"not a --local-rank-arg form: {form!r}")
    return f"--{form}={local_rank}"
