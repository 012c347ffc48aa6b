# shellcheck shell=bash
# Every end of the job goes through finish: its code in exit-code, which `slurmtorch status` reads once
# Slurm has forgotten the job; die: an error of the script's own, in one line, and the job ends with 1.
finish() { printf '%s\n' "$1" >"$SLURMTORCH_JOB_DIR/exit-code"; exit "$1"; }
die() { printf 'slurmtorch: error: %s\n' "$1" >&2; finish 1; }
