"""The layout's rules, read from the source (AST), so a change that breaks one fails here.

- the submit side (slurmtorch/submit) imports nothing from the in-rank side
  (slurmtorch/bootstrap): rendering a script must never need a rank's code;
- the in-rank side imports nothing from the submit side: what both need (variable names,
  the job folder's files, log lines, the requeue) lives at the top level (`protocol`,
  `rankfiles`, `requeue`), so a rank never loads the login node's code;
- subprocesses are run by one room or module per role (submit/edge/ on the login node: its
  runner, and the programs that need more than it (git's bytes, salloc and a local bash in
  the foreground); submit/batchnode/ on a restartable job's batch node (supervisor: the
  steps; slurmjob: scontrol, sinfo, scancel),
  requeue.py for the job that requeues itself) and mpi4py is imported by one (bootstrap/mpi.py): one choke point each
  for side effects;
- no import cycles between modules at import time, and none between packages counting the imports inside functions too;
- the front ends (cli/, api/, remote/) parse and print over usecases/: of submit/ they take
  only the shared records and values named in SHARED_RECORDS, never its internals;
- no module over 500 lines and no function over 80 (split by idea);
- every module has a row in docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "slurmtorch"
MODULES = sorted(PKG.rglob("*.py"))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, top_level_only: bool = False) -> set[str]:
    """Absolute names of the modules `path` imports (anywhere in it, or only at import time)."""
    tree = ast.parse(path.read_text(), str(path))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    if top_level_only:  # module level, including inside try/if blocks there
        nodes = [n for top in tree.body if not isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                 ast.ClassDef)) for n in ast.walk(top)]
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def imports_from(side: str, other: str) -> dict[str, list[str]]:
    """Modules of `side` (a sub-package) that import anything of `other`, anywhere in them."""
    offenders = {module_name(p): sorted(m for m in imports(p) if m == other or m.startswith(other + "."))
                 for p in MODULES if module_name(p).startswith(side + ".")}
    return {k: v for k, v in offenders.items() if v}


def test_the_submit_side_imports_nothing_from_the_in_rank_side():
    assert imports_from("slurmtorch.submit", "slurmtorch.bootstrap") == {}


def test_the_in_rank_side_imports_nothing_from_the_submit_side():
    assert imports_from("slurmtorch.bootstrap", "slurmtorch.submit") == {}


def test_what_both_sides_share_imports_neither():
    shared = [p for p in MODULES if p.parent == PKG]
    offenders = {module_name(p): sorted(m for m in imports(p) if m.startswith(("slurmtorch.submit",
                                                                               "slurmtorch.bootstrap")))
                 for p in shared}
    assert {k: v for k, v in offenders.items() if v} == {}


# subprocess has three edges: the login node's (submit/edge: its runner for sbatch, squeue,
# scancel, srun; git, salloc and a local mpirun's bash start their own), the batch node's (supervisor and steprun: a --max-restarts job's srun steps) and the job's
# own requeue (requeue: scontrol, for a preempted rank and the supervisor alike).
# A rank has one: py-spy reading the rank itself for its native frames (bootstrap.native); a --ray
# job's node another: `ray start` (bootstrap.raynode).
# The laptop has one: ssh and rsync to a cluster (remote.ssh).
@pytest.mark.parametrize("library, owners", [("subprocess", ["slurmtorch.bootstrap.native", "slurmtorch.bootstrap.raynode", "slurmtorch.remote.ssh",
                                                             "slurmtorch.requeue",
                                                             "slurmtorch.submit.batchnode.slurmjob",
                                                             "slurmtorch.submit.batchnode.steprun",
                                                             "slurmtorch.submit.batchnode.supervisor",
                                                             "slurmtorch.submit.edge.git",
                                                             "slurmtorch.submit.edge.local",
                                                             "slurmtorch.submit.edge.runner",
                                                             "slurmtorch.submit.edge.salloc"]),
                                             ("mpi4py", ["slurmtorch.bootstrap.mpi"])])
def test_one_module_owns_each_side_effect(library, owners):
    users = sorted(module_name(p) for p in MODULES
                   if any(m == library or m.startswith(library + ".") for m in imports(p)))
    assert users == owners


def test_no_import_cycles():
    names = {module_name(p): p for p in MODULES}
    graph = {name: {m for m in imports(path, top_level_only=True) if m in names and m != name}
             for name, path in names.items()}
    # A package's __init__ is imported before its modules; that edge is Python's, not a cycle of ours.
    for name in graph:
        graph[name] -= {p for p in graph[name] if name.startswith(p + ".")}
    cycle = first_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def first_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of `graph` (its nodes in order, the first again at the end), or None."""
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                path = trail + [node]
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt, trail + [node])):
                return found
        state[node] = 2
        return None

    for name in sorted(graph):
        if name not in state and (found := visit(name, [])):
            return found
    return None


FRONT_ENDS = ("slurmtorch.cli", "slurmtorch.api", "slurmtorch.remote")

# What a front end may take from submit/ besides usecases/: the records and values every side
# names, each with why. Anything else of submit/ is reached through a use case.
SHARED_RECORDS = {
    "slurmtorch.options": "Options: the one table of what a user may ask, which every front end fills",
    "slurmtorch.submit.sites.model": "the site model's frozen values (Site, NodeType, names) a front end prints",
    "slurmtorch.submit.jobfolder.jobstatus": "JobStatus: how a job stands, as a value every front end shows",
    "slurmtorch.submit.jobfolder.terminaltext": "`visible`: the one filter a job's text passes through to a terminal",
    "slurmtorch.submit.jobfolder.ownership": "the one check that a folder holding what runs as the user is private",
    "slurmtorch.submit.interrupts": "the one signal policy of a slurmtorch process (held until a step is done)",
    "slurmtorch.inputs": "what a path the user typed is, said in one line",
    "slurmtorch.submit.sites.safe_yaml": "the one safe YAML reader (the clusters file is read with it too)",
    "slurmtorch.submit.sites.values": "the one validator of a YAML file's values (the clusters file's too)",
    "slurmtorch.submit.jobfolder.snapshot": "Snapshot: which copy of the code a job runs, on the laptop as here",
    "slurmtorch.submit.launch.chain": "Part: a chain's part as written, in a chain file or Chain(parts)",
}


def package_imports(path: Path) -> set[str]:
    """The package's own modules `path` imports, anywhere in it (functions included): for
    `from P import M` the module M where M is one, else P."""
    names = {module_name(p) for p in MODULES}
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in names else base for a in node.names)
    return {m for m in found if m in names}


def test_front_ends_reach_submit_only_through_usecases_and_shared_records():
    offenders = {module_name(p): sorted(m for m in package_imports(p) if m.startswith("slurmtorch.submit.")
                                        and m not in SHARED_RECORDS)
                 for p in MODULES if module_name(p).startswith(FRONT_ENDS)}
    assert {k: v for k, v in offenders.items() if v} == {}


def room(module: str, house: str) -> str:
    """The room of `house` that `module` is in: its sub-package, or the module itself."""
    return ".".join(module.split(".")[:len(house.split(".")) + 1])


@pytest.mark.parametrize("house", ["slurmtorch", "slurmtorch.submit", "slurmtorch.bootstrap"])
def test_no_circle_between_packages_lazy_imports_included(house):
    graph: dict[str, set[str]] = {}
    for p in MODULES:
        me = module_name(p)
        if not me.startswith(house + "."):
            continue
        for m in package_imports(p):
            if m.startswith(house + ".") and room(m, house) != room(me, house):
                graph.setdefault(room(me, house), set()).add(room(m, house))
    cycle = first_cycle(graph)
    assert cycle is None, "circle between packages: " + " -> ".join(cycle or [])


def test_no_module_is_over_500_lines():
    long = {module_name(p): n for p in MODULES if (n := len(p.read_text().splitlines())) > 500}
    assert long == {}


def test_every_module_is_in_the_architecture_doc():
    doc = (PKG.parent / "docs" / "ARCHITECTURE.md").read_text()
    sections = doc.split("\n## ")
    missing = []
    for p in MODULES:
        parts = p.relative_to(PKG).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) > 1:
            continue  # a sub-package's docstring; the package is its section
        name = "__init__" if parts == ("__init__",) else parts[-1]
        folder = f"slurmtorch/{parts[0]}/" if len(parts) > 1 else "(top level)"
        section = next((s for s in sections if folder in s.split("\n", 1)[0]), "")
        if f"`{name}`" not in section:
            missing.append("/".join(parts))
    assert missing == []



def test_no_function_is_over_80_lines():
    long = {}
    for p in MODULES:
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if (n := node.end_lineno - node.lineno + 1) > 80:
                    long[f"{module_name(p)}.{node.name}"] = n
    assert long == {}
