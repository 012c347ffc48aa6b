"""`python -m slurmtorch`: the `slurmtorch` command, where only the interpreter is on PATH."""

from slurmtorch.cli.main import main

main()
