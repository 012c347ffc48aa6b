"""`slurmtorch doctor`: preflight checks of a node against its site, and the in-allocation
check (`python -m slurmtorch.bootstrap --no-init -m slurmtorch.doctor`)."""
