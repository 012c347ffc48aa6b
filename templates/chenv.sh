# shellcheck shell=bash
# The ranks run under ch-run, which applies the image's environment where the site asks (--set-env), then
# file $1 in the job folder with the variables named after it, so that they keep the values exported
# above; unset ones stay the image's. ch-run(1): NAME=VALUE a line, single quotes around VALUE stripped,
# no newline. $USER too, which ch-run will not start without.
charliecloud_env() {
    local file=$1 name
    shift
    USER=${USER:-$(id -un)}
    export USER
    for name in "$@"; do
        [ -n "${!name+set}" ] || continue
        case ${!name} in *$'\n'*) die "$name holds a newline, which ch-run --set-env cannot carry" ;; esac
        printf "%s='%s'\n" "$name" "${!name}"
    done >"$SLURMTORCH_JOB_DIR/$file"
}
