# shellcheck shell=bash
# The job's record (events.jsonl, a JSON line an event, as slurmtorch.events reads it: `slurmtorch status`,
# `--wait` and `top` tell the job's story from it): `note started` at each start of this script (Slurm's
# restart count, its nodes, this host), `note ended CODE` at its end (finish); killed (requeued, cancelled,
# out of time), its EXIT trap notes the end without a code. Only digits, Slurm's node lists and host names
# go in, so the line is JSON whatever they hold; one write of one short line (events.MAX_LINE), a file of
# mode 0600, never through a link or into anything but a regular file.
note() {
    local attempt=${SLURM_RESTART_COUNT:-0} said='' file=$SLURMTORCH_JOB_DIR/events.jsonl
    [[ $attempt =~ ^[0-9]{1,9}$ ]] || attempt=0
    if [ "$1" = started ]; then
        local nodes=${SLURM_JOB_NODELIST:-} host=${SLURMD_NODENAME:-$HOSTNAME}
        [[ $nodes =~ ^[][A-Za-z0-9_.,-]{1,2000}$ ]] || nodes=
        [[ $host =~ ^[A-Za-z0-9_.-]{1,255}$ ]] || host=
        said=',"nodes":"'$nodes'","host":"'$host'"'
        trap 'note ended' EXIT
    else
        trap - EXIT
        [[ ${2:-} =~ ^[0-9]{1,3}$ ]] && said=',"code":'$2
    fi
    if [ -L "$file" ] || { [ -e "$file" ] && [ ! -f "$file" ]; }; then
        return 0
    fi
    (umask 077 && printf '{"v":1,"t":%(%s)T,"ev":"%s","attempt":%s%s}\n' -1 "$1" "$attempt" "$said" >>"$file") 2>/dev/null
    return 0
}
