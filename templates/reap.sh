# shellcheck shell=bash
# The steps started in the background (`track PID NAME [job|vital]` after each), reaped as they end (`wait
# -n`). The first to fail stops the others (a dead worker would leave the master in a collective until the
# group's timeout); services (parameter servers, an evaluator) serve until every job step has ended; a
# vital one (a Ray node) ending at all stops the job.
track() {
    step[$1]=$2
    [ "${3:-}" != job ] || job[$1]=1
    [ "${3:-}" != vital ] || vital[$1]=1
}
reap() {
    local pid code
    rc=0
    while [ "$rc" -eq 0 ] && [ -n "${job[*]}" ]; do
        wait -n
        for pid in "${!step[@]}"; do
            kill -0 "$pid" 2>/dev/null && continue
            wait "$pid"
            code=$?
            [ "$code" -ne 0 ] || [ -z "${vital[pid]:-}" ] || code=1
            if [ "$code" -ne 0 ] && [ "$rc" -eq 0 ]; then
                rc=$code
                printf 'slurmtorch: %s exited with %s; stopping the other steps\n' "${step[pid]}" "$rc" >&2
            fi
            unset 'step[pid]' 'job[pid]' 'vital[pid]'
        done
    done
}
# Then TERM to the rest (srun passes it on to its tasks); one that ignores it must not hold the job: after
# $1 seconds srun itself is killed, and the end of the job takes its step down. The job steps' code is returned.
settle() {
    local polls=$(($1 * 5))
    kill "${!step[@]}" 2>/dev/null
    while [ "$polls" -gt 0 ] && kill -0 "${!step[@]}" 2>/dev/null; do
        sleep 0.2
        polls=$((polls - 1))
    done
    kill -KILL "${!step[@]}" 2>/dev/null
    wait
    return "$rc"
}
