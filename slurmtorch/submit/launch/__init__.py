"""The launch: what the user asked (`options`), checked against the site into a `JobSpec`
(`spec` and the pure steps it calls: allocation, sbatch options, launcher, containers,
environment, preemption, roles on node types, restarts, Ray, sweeps), planned as a tuple of
steps (`steps`, `launchplan`) and rendered (`render`, `scripttext`): the dry run, pure."""
