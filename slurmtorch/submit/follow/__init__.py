"""Following jobs: what Slurm says of a job, how often it is asked, waiting, logs as they grow,
the status line.
"""
