"""How a rank starts inside a container, for each runtime (pure): what goes before the
bootstrap's argv, and what goes on srun's line.

- pyxis/enroot: srun itself starts the task in the image (`--container-image`,
  `--container-mounts`; https://github.com/NVIDIA/pyxis#usage); it passes the task's
  environment in, but where the image sets a variable too the image's value wins (NGC
  images set LD_LIBRARY_PATH, NCCL_*): every variable the job's environment sets (the
  fabric's, the site's, --env) is named with `--container-env`, which makes the host's value
  win (pyxis's usage: "names of environment variables to override with the host
  environment"), so that, say, the NCCL network plugin on the site's LD_LIBRARY_PATH reaches
  NCCL instead of a silent fall back to TCP. Azure's NDv5 examples pass it the same way.
- apptainer: `apptainer exec [--nv|--rocm] [--bind SRC[:DST]] IMAGE CMD` under srun
  (https://apptainer.org/docs/user/latest/gpu.html, .../bind_paths_and_mounts.html); the
  host environment passes in by default.
- podman-hpc (NERSC): `podman-hpc run --rm [--gpu] -v SRC:DST -e NAME IMAGE CMD` under
  srun (https://github.com/NERSC/podman-hpc: its mpi module runs with --network=host
  --ipc=host --pid=host and passes `-e SLURM_*`). podman passes nothing of the host's
  environment unless asked, so every variable the batch script exports for the ranks is
  named with -e, and the ranks share the node's network (gloo/NCCL sockets, the store).
- shifter (NERSC): `shifter --image=IMAGE [--volume=SRC:DST] CMD` under srun
  (https://github.com/NERSC/shifter/blob/master/doc/command/shifter.rst); the
  environment passes in.
- cscs-ce (CSCS's Container Engine on Alps): `srun --environment=FILE.toml`, FILE an
  Environment Definition File (EDF, TOML: image, mounts, entrypoint, writable, [env],
  [annotations]; docs/software/container-engine/edf.md in eth-cscs/cscs-docs) that the batch
  script writes into the job folder (`edf_text`). The container inherits the host's
  environment, but the image's value of a variable wins over the host's and `${NAME}` in the
  EDF expands from the image's first, so, as pyxis's --container-env does, every variable
  the job's environment sets goes into [env] as its literal value (`$` doubled: CE's own
  escape). The Alps Extended Images' EDF and srun line
  (docs/software/alps-extended-images.md) are a site's `container:` and preset.
- charliecloud (LANL; Debian's `charliecloud`): `ch-run [-b SRC:DST] IMAGE -- CMD` under srun
  or mpirun, an unprivileged user and mount namespace over a directory (or SquashFS) image,
  no daemon, the node's network (ch-run(1), https://hpc.github.io/charliecloud/ch-run.html).
  The host environment passes in unchanged; the image's own (`/ch/environment`, what its
  Dockerfile's ENV set) only with `--set-env`, which a site adds to `args`. After those,
  `--set-env=FILE` sets the job's variables again from a file the batch script writes
  (CHARLIECLOUD_ENV), so the site's values win over the image's, as with pyxis. The
  image must hold the bind targets (ch-run 0.31 mounts the image read-only and creates
  no directories in it); the host's /tmp is the container's /tmp.

Every runtime gets the job folder's root and the script's folder mounted at the same
path, so the ranks find the script and write their logs, heartbeats and exit notes where
the login node reads them. The site's own `mounts` and `args` (e.g. `--module=gpu` for
shifter, `--nccl` for podman-hpc) come after.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from slurmtorch import shell
from slurmtorch.errors import SpecError

# The EDF's name in the job folder; the batch script writes it there (launchplan.plan).
EDF_FILE = "environment.toml"
EDF_END = "SLURMTORCH_EDF"  # the quoted here-document's delimiter: no line of edf_text can equal it

# Names the batch script exports for the ranks besides the job's env (spec.env): podman
# passes none of them unless named (`-e NAME`, `-e PREFIX*`).
BATCH_EXPORTS = ("SLURM_*", "SLURMTORCH_*", "MASTER_ADDR", "MASTER_PORT")


# The batch script writes the job's variables here for ch-run (--set-env=FILE), in the job folder.
CHARLIECLOUD_ENV = "container.env"


@dataclass(frozen=True)
class InJobFolder:
    """An argument naming a file in the job's folder, `PREFIX$SLURMTORCH_JOB_DIR/NAME`: the
    folder is known only when the job runs, so the batch script's shell expands it
    (scripttext.script_quote writes the variable, and quotes the rest)."""

    prefix: str
    name: str

    def __str__(self) -> str:
        return f"{self.prefix}$SLURMTORCH_JOB_DIR/{self.name}"


def job_env_names(spec) -> list[str]:
    """The names the batch script exports from the job's environment (spec.env, then the path
    compositions), each once, in order."""
    return list(dict.fromkeys((*(n for n, _ in spec.env), *(n for n, _, _ in spec.env_paths))))


def own_mounts(spec) -> list[str]:
    """SRC:DST of the jobs folder and the script's folder, each at its own path inside (one
    inside the other: the outer one only)."""
    auto: list[str] = []
    for path in sorted({spec.job_root, *([os.path.dirname(spec.script)] if spec.script else [])}):
        if not any(path == a or path.startswith(a.rstrip("/") + "/") for a in auto):  # not inside one already
            auto.append(path)
    return [f"{p}:{p}" for p in auto]


def mounts(spec, c) -> list[str]:
    """SRC:DST bind mounts of container `c`: ours (own_mounts), then the site's; each source once."""
    out: list[str] = []
    for m in (*own_mounts(spec), *c.mounts):
        if m not in out and not any(m.split(":", 1)[0] == o.split(":", 1)[0] for o in out):
            out.append(m)
    return out


def container_args(spec, c) -> tuple[list, list[str]]:
    """(argv before the rank's python, srun options) that run a rank in container `c` (or None)."""
    if c is None:
        return [], []
    binds = mounts(spec, c)
    gpus = bool(spec.gpus_per_node)
    if c.runtime == "pyxis":
        names = job_env_names(spec)
        keep = [f"--container-env={','.join(names)}"] if names else []
        return [], [f"--container-image={c.image}", f"--container-mounts={','.join(binds)}", *keep, *c.args]
    if c.runtime == "apptainer":
        # IDRIS runs it as `singularity exec` (container.command); the same options.
        # LUMI runs `singularity run` (container.subcommand): the image's runscript, then the rank.
        prefix = [c.command or "apptainer", c.subcommand or "exec"]
        if gpus and c.gpu_flag:
            # The host's GPU driver libraries and devices in the container: NVIDIA's, or AMD's ROCm.
            prefix.append("--rocm" if spec.gpu_vendor == "amd" else "--nv")
        for m in binds:
            prefix += ["--bind", m]
        image = shell.JobTimeWord(c.image) if "$" in c.image else c.image
        return [*prefix, *c.args, image], []
    if c.runtime == "podman-hpc":
        prefix = ["podman-hpc", "run", "--rm", "--network=host", "--ipc=host", "--pid=host"]
        if gpus and c.gpu_flag and spec.gpu_vendor != "amd":
            prefix.append("--gpu")
        for m in binds:
            prefix += ["-v", m]
        for name in (*BATCH_EXPORTS, *job_env_names(spec)):
            prefix += ["-e", name]
        return [*prefix, *c.args, c.image], []
    if c.runtime == "shifter":
        return ["shifter", f"--image={c.image}", *(f"--volume={m}" for m in binds), *c.args], []
    if c.runtime == "cscs-ce":
        # The image, mounts and environment are the EDF's (edf_text); srun gets --environment
        # from the template, which knows the job folder only at run time.
        return [], [*c.args]
    if c.runtime == "charliecloud":
        words: list[str | InJobFolder] = ["ch-run", *(f"--bind={m}" for m in binds)]
        words += c.args
        if spec.kind == "sbatch" and job_env_names(spec):
            # Literal values: no `$NAME` expansion of what the batch script already expanded.
            # (ch-run 0.31 reads this flag before any --set-env: the image's file too.)
            words += ["--env-no-expand", InJobFolder("--set-env=", CHARLIECLOUD_ENV)]
        return [*words, c.image, "--"], []
    raise AssertionError(c.runtime)  # validated on load and by resolve_containers


def edf_text(spec, c) -> str:
    """The EDF (TOML) of a cscs-ce container `c` for this job (pure): the image, our mounts and
    the site's, the site's entrypoint/writable, the job's environment as literal values, the
    site's annotations. Image and site mounts keep CE's `${VAR}` expansion (CSCS's examples
    use ${SCRATCH}); our own paths and the environment's values are literal."""
    lines = ["# CSCS Container Engine environment (EDF) of the ranks, written by slurmtorch",
             f"image = {toml_string(c.image)}", "mounts = ["]
    own = set(own_mounts(spec))
    for m in mounts(spec, c):
        lines.append(f"    {toml_string(literal(m) if m in own else m)},")
    lines.append("]")
    for key in ("entrypoint", "writable"):
        if getattr(c, key) is not None:
            lines.append(f"{key} = {'true' if getattr(c, key) else 'false'}")
    if spec.env:
        lines += ["", "[env]", *(f"{name} = {toml_string(literal(value))}" for name, value in spec.env)]
    if c.annotations:
        lines += ["", "[annotations]", *(f"{key} = {toml_string(value)}" for key, value in c.annotations)]
    text = "\n".join(lines) + "\n"
    if EDF_END in text.splitlines():  # cannot happen: every line is a key, a bracket or a quoted string
        raise SpecError("the container's EDF would end its here-document early")
    return text


def literal(text: str) -> str:
    """`text` as CE reads it back unexpanded: `$` doubled (edf.md: "$${VAR} will render as ${VAR}")."""
    return text.replace("$", "$$")


def toml_string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped (TOML 1.0)."""
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)
