"""Issue 44: what a pull does with each entry a job sent, against the laptop's tree (pullplan, pure)."""

from __future__ import annotations

from slurmtorch.remote.ledger import Placed
from slurmtorch.remote.pullplan import (DIR, DIRLINK, FILE, LINK, OTHER, Here, Plan, Staged, Step, needs_hash,
                                        plan, report, settled, shown)

UMASK = 0o022
A, B = "a" * 64, "b" * 64


def f(path: str, sha: str = A, mode: int = 0o600, size: int = 5, mtime: int = 7_000_000_001) -> Staged:
    return Staged(path, FILE, size, mtime, mode, sha)


def d(path: str) -> Staged:
    return Staged(path, DIR)


def settled_now(*staged: Staged) -> dict[str, tuple[int, int]]:
    return {s.path: (s.size, s.mtime_ns) for s in staged if s.kind == FILE}


def decide(staged, here=None, ledger=None, now=None) -> Plan:
    return plan(staged, here or {}, ledger or {}, settled_now(*staged) if now is None else now, UMASK)


def test_a_new_file_gets_the_laptops_default_mode_never_the_mirrors_private_one():
    p = decide([f("ckpt.pt", mode=0o600)])
    assert p.steps == (Step("ckpt.pt", "new", 0o644, A),) and p.placed == 1
    assert p.dotfiles == () and p.executables == ()


def test_a_new_executable_keeps_its_x_and_is_named():
    p = decide([f("run.sh", mode=0o700)])
    assert p.steps == (Step("run.sh", "new", 0o755, A),) and p.executables == ("run.sh",)


def test_new_dotfiles_at_any_depth_are_placed_and_named():
    p = decide([f(".envrc"), d(".config"), f(".config/x"), d("a"), f("a/.hidden"), f("a/plain")])
    assert p.dotfiles == (".config/x", ".envrc", "a/.hidden")
    assert [s.path for s in p.steps if s.action == "new"] == [".config/x", ".envrc", "a/.hidden", "a/plain"]


def test_an_existing_laptop_file_of_the_users_is_kept_however_the_job_dates_its_own():
    job = f(".bashrc", sha=B, mtime=4_000_000_000 * 10**9)  # years ahead
    p = decide([job], here={".bashrc": Here(FILE, 6, 1, 0o644, A)})
    assert p.steps == () and p.kept == ((".bashrc", ""),)


def test_the_same_file_is_left_alone():
    p = decide([f("x", sha=A)], here={"x": Here(FILE, 5, 1, 0o644, A)})
    assert p.steps == () and p.kept == ()


def test_a_file_an_earlier_pull_placed_and_the_user_left_alone_gives_way_to_the_jobs_newer_one():
    here = {"ckpt.pt": Here(FILE, 5, 100, 0o640, A)}
    p = decide([f("ckpt.pt", sha=B)], here=here, ledger={"ckpt.pt": Placed(5, 100, A)})
    assert p.steps == (Step("ckpt.pt", "replace", 0o640, B),)  # the laptop's mode stays


def test_a_file_an_earlier_pull_placed_and_the_user_changed_since_is_kept_and_said_so():
    here = {"ckpt.pt": Here(FILE, 9, 200, 0o644, "")}
    p = decide([f("ckpt.pt", sha=B)], here=here, ledger={"ckpt.pt": Placed(5, 100, A)})
    assert p.steps == () and p.kept == (("ckpt.pt", "changed here since pulled"),)
    same_size_and_time_other_bytes = {"ckpt.pt": Here(FILE, 5, 100, 0o644, "c" * 64)}
    p = decide([f("ckpt.pt", sha=B)], here=same_size_and_time_other_bytes, ledger={"ckpt.pt": Placed(5, 100, A)})
    assert p.steps == () and p.kept == (("ckpt.pt", "changed here since pulled"),)


def test_a_laptop_file_where_the_job_has_a_folder_is_kept_and_nothing_below_comes():
    """Issue 44: a laptop file `results` was deleted when the job made a folder `results/`."""
    staged = [d("results"), f("results/m.json"), d("results/deep"), f("results/deep/x")]
    p = decide(staged, here={"results": Here(FILE, 3, 1, 0o644)})
    assert p.steps == () and p.kept == (("results", "a file here, a folder in the job"),)


def test_a_laptop_folder_or_link_where_the_job_has_a_file_is_kept():
    staged = [f("data"), f("out"), f("pipe"), f("dl")]
    here = {"data": Here(DIR), "out": Here(LINK, target="/gone"), "pipe": Here(OTHER),
            "dl": Here(DIRLINK, target="/big")}
    p = decide(staged, here=here)
    assert p.steps == ()
    assert dict(p.kept) == {"data": "a folder here, a file in the job", "out": "a link here, a file in the job",
                            "pipe": "not a plain file here, a file in the job",
                            "dl": "a link to a folder here, a file in the job"}


def test_the_users_link_to_a_folder_is_written_through_and_named_a_dangling_one_kept():
    """Issue 44: `outputs -> /bigdisk/outputs` became a local folder."""
    staged = [d("outputs"), f("outputs/run.txt"), d("gone"), f("gone/x")]
    here = {"outputs": Here(DIRLINK, target="/bigdisk/outputs"), "gone": Here(LINK, target="/nowhere")}
    p = decide(staged, here=here)
    assert p.steps == (Step("outputs/run.txt", "new", 0o644, A),)
    assert p.through == (("outputs", "/bigdisk/outputs"),)
    assert p.kept == (("gone", "a link here, a folder in the job"),)


def test_new_folders_are_made_with_the_umask_existing_ones_untouched():
    p = decide([d("new"), f("new/x"), d("old"), f("old/y")], here={"old": Here(DIR)})
    assert p.steps == (Step("new", "mkdir", 0o755), Step("new/x", "new", 0o644, A), Step("old/y", "new", 0o644, A))


def test_a_file_still_changing_on_the_cluster_is_not_placed():
    grew, touched, gone, steady = f("log"), f("ckpt", sha=B), f("tmp"), f("done")
    now = {"log": (6, grew.mtime_ns + 5), "ckpt": (5, touched.mtime_ns + 1), "tmp": None,
           "done": (5, steady.mtime_ns)}
    p = decide([grew, touched, gone, steady], now=now)
    assert p.changing == ("ckpt", "log", "tmp") and [s.path for s in p.steps] == ["done"]


def test_a_kept_file_is_said_as_kept_even_while_it_changes():
    p = decide([f("notes")], here={"notes": Here(FILE, 1, 1, 0o644)}, now={"notes": None})
    assert p.kept == (("notes", ""),) and p.changing == ()


def test_whole_second_times_compare_to_the_second():
    whole = f("x", mtime=7 * 10**9)
    assert settled(whole, (5, 7 * 10**9 + 123))
    assert not settled(whole, (5, 8 * 10**9))
    assert not settled(f("y", mtime=7 * 10**9 + 1), (5, 7 * 10**9 + 2))
    assert not settled(whole, (6, 7 * 10**9)) and not settled(whole, None)


def test_a_laptop_file_is_hashed_only_where_it_may_be_the_same_or_as_placed():
    s = f("x", size=5)
    assert needs_hash(s, 5, 1, None)
    assert not needs_hash(s, 9, 1, None)
    assert needs_hash(s, 9, 1, Placed(9, 1, A)) and not needs_hash(s, 9, 2, Placed(9, 1, A))


def test_the_report_names_what_the_user_should_look_at_once_each_kind():
    p = Plan(steps=(Step(".envrc", "new", 0o644, A), Step("run.sh", "new", 0o755, A), Step("d", "mkdir", 0o755)),
             kept=(("notes.txt", ""), ("results", "a file here, a folder in the job")), changing=("log",),
             dotfiles=(".envrc",), executables=("run.sh",), through=(("outputs", "/big"),))
    lines = report(p, job="42", cluster="hpc", source="/s/proj", dest="/home/me/proj", running=True,
                   never=[".git (a git folder)", "leak (a link to /etc/hostname)"])
    assert lines[0] == "slurmtorch: pulled 2 files of job 42 from hpc:/s/proj into /home/me/proj"
    assert lines[1:] == [
        "slurmtorch: new dotfiles (look before anything runs them): .envrc",
        "slurmtorch: new executables: run.sh",
        "slurmtorch: kept yours: notes.txt, results (a file here, a folder in the job); the job's are not placed "
        "(slurmtorch pull 42 --to DIR --cluster hpc brings them into another folder)",
        "slurmtorch: written through your links: outputs -> /big",
        "slurmtorch: still changing on the cluster, not placed: log; the job is still running: pull again after it ends",
        "slurmtorch: never pulled: .git (a git folder), leak (a link to /etc/hostname)",
    ]
    assert report(Plan(), job="1", cluster="c", source="/s", dest="/d", running=False) == [
        "slurmtorch: pulled 0 files of job 1 from c:/s into /d"]


def test_the_report_names_ten_and_counts_the_rest_and_shows_no_escape_sequence():
    many = tuple(f".f{i}" for i in range(13))
    line = report(Plan(dotfiles=many), job="1", cluster="c", source="/s", dest="/d", running=False)[1]
    assert line.endswith(".f9 and 3 more")
    assert shown("a\x1b[2Jb\nc\udc80") == "a\\x1b[2Jb\\nc\\udc80"
    never = report(Plan(), job="1", cluster="c", source="/s", dest="/d", running=False, never=["x"], never_more=4)
    assert never[-1] == "slurmtorch: never pulled: x and 4 more"
