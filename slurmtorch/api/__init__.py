"""The Python API: `Distributor(...).run(fn_or_file, *args)`, a TorchDistributor-like front
on the same submit path as the CLI."""
