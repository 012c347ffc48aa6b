"""The submit side (login node): site config -> JobSpec -> rendered script -> sbatch.

`sites` (validated YAML presets) -> `launch` (`JobSpec`, its steps, the rendered script: the dry
run, pure) -> `jobfolder` + `edge` (the job folder, and one module per scheduler program).
Never imports torch, mpi4py or anything from `slurmtorch.bootstrap` (the in-rank side).
"""
