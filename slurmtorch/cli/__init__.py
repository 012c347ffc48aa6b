"""The `slurmtorch` command line: one module per verb, composed in `main`."""
