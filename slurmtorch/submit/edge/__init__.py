"""The login node's edge: every program slurmtorch runs there, one module per program
family (sbatch, salloc, squeue/scontrol, scancel, the stacks signals, git, a local bash
run), each through `runner`, whose errors carry argv, exit code, stdout and stderr.
"""
