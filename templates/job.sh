# shellcheck shell=bash
# Every end of the job goes through finish: its code in exit-code, which `slurmtorch status` reads once Slurm has forgotten
# the job, and in its record (note: record.sh's, once sourced); die: an error of the script's own, in one line; exit 1.
finish() { printf '%s\n' "$1" >"$SLURMTORCH_JOB_DIR/exit-code"; ! declare -F note >/dev/null || note ended "$1"; exit "$1"; }
die() { printf 'slurmtorch: error: %s\n' "$1" >&2; finish 1; }
