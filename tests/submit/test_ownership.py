"""Folders slurmtorch writes code into are refused when another user owns or can write them.

Real folders, really chowned to another user (`nobody`): these tests run as root, whom
permissions never stop, so ownership and mode bits are what the check must read. Each
refusal is one error line naming the folder and why, and a tip with the fix.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from slurmtorch.errors import SubmitError
from slurmtorch.submit.launch import render
from slurmtorch.submit.jobfolder import jobdir
from slurmtorch.submit.jobfolder import ownership

OTHER = pwd.getpwnam("nobody").pw_uid
ME = os.geteuid()


def folder(path: Path, mode: int = 0o700, owner: int | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, mode)
    if owner is not None:
        os.chown(path, owner, -1)
    return path


def refusal(root: Path) -> SubmitError:
    with pytest.raises(SubmitError) as e:
        ownership.secure_folder(root, root.parent)
    assert "\n" not in e.value.message and e.value.tip
    return e.value


@pytest.fixture
def base(tmp_path) -> Path:
    """A safe place to start from (pytest's tmp_path is root's, 0700, under sticky /tmp)."""
    return folder(tmp_path / "base", 0o755)


def test_a_home_owned_by_another_user_is_refused_and_nothing_is_made_in_it(base):
    home = folder(base / "shared", 0o755, OTHER)
    e = refusal(home / "jobs")
    assert e.message.startswith(f"{home} (SLURMTORCH_HOME) belongs to nobody (uid {OTHER}), not to you: ")
    assert "run as you" in e.message and "set SLURMTORCH_HOME to a folder of your own" in e.tip
    assert list(home.iterdir()) == []


@pytest.mark.parametrize("mode, who", [(0o775, "its group"), (0o757, "anyone"), (0o1777, "anyone")])
def test_a_home_others_can_write_is_refused_with_the_chmod_that_fixes_it(base, mode, who):
    home = folder(base / "home", mode)
    e = refusal(home / "jobs")
    assert f"(SLURMTORCH_HOME) is writable by {who} (mode {mode:04o})" in e.message
    assert e.tip == f"chmod go-w {home}"
    os.chmod(home, 0o755)  # the fix works
    ownership.secure_folder(home / "jobs", home)


@pytest.mark.parametrize("owner, mode, why", [(OTHER, 0o700, f"belongs to nobody (uid {OTHER}), not to you"),
                                              (ME, 0o770, "is writable by its group (mode 0770)")])
def test_a_jobs_folder_another_user_owns_or_can_write_is_refused(base, owner, mode, why):
    home = folder(base / "home")
    jobs = folder(home / "jobs", mode, owner)
    e = refusal(jobs)
    assert e.message.startswith(f"{jobs} (in SLURMTORCH_HOME {home}) {why}")


def test_a_level_above_the_home_owned_by_another_user_is_refused(base):
    shared = folder(base / "scratch", 0o755, OTHER)
    e = refusal(shared / "me" / "home" / "jobs")
    assert e.message.startswith(f"{shared} (on the way to SLURMTORCH_HOME {shared / 'me' / 'home'}) "
                                f"belongs to nobody (uid {OTHER}), who can rename what is in it")
    assert not (shared / "me").exists()  # nothing made under a level that failed


@pytest.mark.parametrize("mode, who", [(0o777, "anyone"), (0o775, "its group")])
def test_a_level_above_the_home_others_can_write_is_refused_unless_sticky(base, mode, who):
    scratch = folder(base / "scratch", mode)
    e = refusal(scratch / "home" / "jobs")
    assert f"is writable by {who} and not sticky (mode {mode:04o})" in e.message
    assert e.tip.startswith(f"chmod go-w {scratch} (or +t)")
    os.chmod(scratch, mode | stat.S_ISVTX)  # as /tmp: only an entry's owner may rename it
    ownership.secure_folder(scratch / "home" / "jobs", scratch / "home")


def test_missing_levels_are_made_private_whatever_the_umask(base):
    old = os.umask(0)
    try:
        ownership.secure_folder(base / "a" / "home" / "jobs", base / "a" / "home")
    finally:
        os.umask(old)
    for p in (base / "a", base / "a" / "home", base / "a" / "home" / "jobs"):
        assert stat.S_IMODE(p.stat().st_mode) == 0o700, p


def test_a_symbolic_link_another_user_owns_is_refused_even_to_a_good_folder(base):
    sticky = folder(base / "tmp", 0o1777)
    mine = folder(base / "mine")
    link = sticky / "home"
    link.symlink_to(mine)
    os.lchown(link, OTHER, -1)  # in a sticky folder its owner may replace it at any time
    e = refusal(link / "jobs")
    assert e.message.startswith(f"{link} (SLURMTORCH_HOME) is a symbolic link owned by nobody (uid {OTHER})")


def test_a_home_that_is_my_link_to_my_folder_is_used_and_the_target_is_checked(base):
    target = folder(base / "scratch" / "st")
    (base / "home").symlink_to(target)
    ownership.secure_folder(base / "home" / "jobs", base / "home")
    assert stat.S_IMODE((target / "jobs").stat().st_mode) == 0o700
    os.chown(target, OTHER, -1)  # the folder the link leads to is the one written into
    e = refusal(base / "home" / "jobs")
    assert e.message.startswith(f"{target} (in SLURMTORCH_HOME {base / 'home'}) belongs to nobody")


def test_a_relative_link_through_a_foreign_folder_is_followed_and_refused(base):
    theirs = folder(base / "theirs", 0o755, OTHER)
    folder(theirs / "st")
    (base / "home").symlink_to("theirs/st")
    e = refusal(base / "home" / "jobs")
    assert e.message.startswith(f"{theirs} (on the way to SLURMTORCH_HOME")


def test_a_link_loop_is_an_os_error_which_callers_turn_into_their_line(base):
    (base / "home").symlink_to(base / "home")
    with pytest.raises(OSError) as e:
        ownership.secure_folder(base / "home" / "jobs", base / "home")
    assert e.value.errno == errno.ELOOP
    with pytest.raises(SubmitError, match=r"cannot write the job folder .*too many levels of symbolic links"):
        jobdir.make_temp(base / "home" / "jobs", "#!/bin/bash\n")


def test_a_file_where_the_home_should_be_is_refused(base):
    (base / "home").write_text("")
    e = refusal(base / "home" / "jobs")
    assert e.message == f"{base / 'home'} (SLURMTORCH_HOME) is not a folder"


@pytest.mark.parametrize("kind, uid, mode, own, why", [
    ("dir", ME, 0o700, True, None),
    ("dir", ME, 0o755, True, None),
    ("dir", ME, 0o750, False, None),
    ("dir", 0, 0o1777, False, None),
    ("dir", 0, 0o755, False, None),
    ("dir", 0, 0o755, True, None if ME == 0 else "belongs to root (uid 0), not to you"),
    ("dir", OTHER, 0o700, True, f"belongs to nobody (uid {OTHER}), not to you"),
    ("dir", OTHER, 0o755, False, f"belongs to nobody (uid {OTHER}), who can rename what is in it"),
    ("dir", ME, 0o720, True, "is writable by its group (mode 0720)"),
    ("dir", ME, 0o702, True, "is writable by anyone (mode 0702)"),
    ("dir", ME, 0o1777, True, "is writable by anyone (mode 1777)"),
    ("dir", ME, 0o2770, False, "is writable by its group and not sticky (mode 2770), so they can rename what is in it"),
    ("link", OTHER, 0o777, False, f"is a symbolic link owned by nobody (uid {OTHER})"),
    ("link", ME, 0o777, True, None),
    ("file", ME, 0o600, True, ownership.NOT_A_FOLDER),
])
def test_level_problem_says_why_a_level_is_unsafe(kind, uid, mode, own, why):
    kinds = {"dir": stat.S_IFDIR, "link": stat.S_IFLNK, "file": stat.S_IFREG}
    st = os.stat_result((kinds[kind] | mode, 0, 0, 1, uid, 0, 0, 0, 0, 0))
    assert ownership.level_problem(st, ME, own) == why


def test_the_jobs_folder_is_checked_before_a_job_folder_is_written(base):
    home = folder(base / "home", 0o755, OTHER)
    with pytest.raises(SubmitError, match="belongs to nobody"):
        jobdir.make_temp(home / "jobs", "#!/bin/bash\n")
    assert list(home.iterdir()) == []


def test_the_caches_are_not_used_from_a_folder_another_user_owns(base, monkeypatch):
    cache = folder(base / "cache", 0o755)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    assert ownership.cache_folder("templates") == cache / "slurmtorch" / "templates"
    os.chown(cache / "slurmtorch", OTHER, -1)
    assert ownership.cache_folder("templates") is None


def test_compiled_templates_are_kept_in_the_private_cache_not_in_tmp(base, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(base))
    monkeypatch.delenv("SLURMTORCH_NO_TEMPLATE_CACHE", raising=False)
    cache = render._bytecode_cache()
    assert cache.directory == str(base / "slurmtorch" / "templates")
    os.chown(base / "slurmtorch", OTHER, -1)
    assert render._bytecode_cache() is None


def test_the_cli_refuses_a_group_writable_home_before_it_submits_and_a_dry_run_never_looks(base):
    """The real CLI: the home is checked when a job folder is written, before sbatch runs
    (none is on PATH here: reaching it would be a different error)."""
    home = folder(base / "home", 0o775)
    script = base / "train.py"
    script.write_text("pass\n")
    env = {**os.environ, "SLURMTORCH_HOME": str(home), "PATH": "/nonexistent"}
    argv = [sys.executable, "-m", "slurmtorch", "sbatch", "--site", "testbed", str(script)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == (f"error: {home} (SLURMTORCH_HOME) is writable by its group (mode 0775): another user "
                           "could swap the scripts and payloads slurmtorch keeps there, which run as you\n"
                           f"tip: chmod go-w {home}\n")
    assert list(home.iterdir()) == []
    dry = subprocess.run([*argv[:-1], "--dry-run", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0 and dry.stdout.startswith("#!")
