"""`--init-args`: the rendezvous URL, rank and world size as arguments, for scripts that parse them.

ModelArts' convention is `--init_method tcp://ADDR:PORT --rank R --world_size N`; pytorch/examples'
imagenet (and many scripts copied from it) spell them `--dist-url --rank --world-size`, and with
`--multiprocessing-distributed` count nodes, not processes (one process per node spawns its GPUs'
workers). So the option names a shape and, optionally, the three flags:

    rank                      --init_method URL --rank R --world_size N   (per process)
    node                      the same per node (node rank / node count; one task per node)
    node:dist-url,rank,world-size   --dist-url URL --rank NODE --world-size NODES

Checked here on the submit side (`slurmtorch sbatch|mpirun --init-args`) and on the rank side
(`python -m slurmtorch.bootstrap --init-args=...`): one owner for both.
"""

from __future__ import annotations

import re

SHAPES = ("rank", "node")
DEFAULT_NAMES = ("init_method", "rank", "world_size")
_NAME_RE = r"^[A-Za-z][A-Za-z0-9_-]*$"  # compiled on first use (re's cache)
TIP = ("--init-args=rank (--init_method URL --rank R --world_size N per process), --init-args=node (per node), "
       "or name the flags: --init-args=node:dist-url,rank,world-size (pytorch/examples' imagenet)")


class InitArgsError(ValueError):
    """A malformed `--init-args` value; each side wraps it in its own error type."""


def parse(text: str) -> tuple[str, tuple[str, str, str]]:
    """`node:dist-url,rank,world-size` -> ("node", ("dist-url", "rank", "world-size")) (pure)."""
    shape, sep, names_text = str(text).partition(":")
    shape = shape or "rank"
    if shape not in SHAPES:
        raise InitArgsError(f"--init-args={text}: the shape {shape!r} is not rank or node")
    if not sep:
        return shape, DEFAULT_NAMES
    names = tuple(name.strip().lstrip("-") for name in names_text.split(","))
    if len(names) != 3 or not all(re.match(_NAME_RE, name) for name in names):
        raise InitArgsError(f"--init-args={text}: give three flag names, URL,RANK,WORLD (letters, digits, '_', '-')")
    if len(set(names)) != 3:
        raise InitArgsError(f"--init-args={text}: the three flag names must differ")
    return shape, (names[0], names[1], names[2])


def is_value(word: str) -> bool:
    """Whether `word` reads as an --init-args value (a shape, then perhaps `:` and flag names),
    not a script: `--init-args train.py` is the bare flag before SCRIPT, as the bootstrap reads it."""
    return str(word).partition(":")[0] in SHAPES


def arguments(names: tuple[str, str, str], url: str, rank: int, world: int) -> list[str]:
    """The arguments appended to the script's own: `--URL url --RANK r --WORLD n`."""
    return [f"--{names[0]}", url, f"--{names[1]}", str(rank), f"--{names[2]}", str(world)]
