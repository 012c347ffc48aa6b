"""The cache of validated sites: answers only while nothing a site was made from changed."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from slurmtorch.errors import SiteError
from slurmtorch.submit import sitecache
from slurmtorch.submit import sites

BASE = """\
node_types:
  cpu: {gpus: 0, cpus: 4, fabric: ethernet, interfaces: [eth0]}
partitions:
  debug: {max_nodes: 2, max_time: "01:00:00", node_type: cpu, default: true}
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("SLURMTORCH_NO_SITE_CACHE", raising=False)
    monkeypatch.setenv("SLURMTORCH_SITE_PATH", str(tmp_path / "sites"))
    (tmp_path / "sites").mkdir()
    return tmp_path / "cache" / "slurmtorch" / "sites"


def site_file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / "sites" / f"{name}.yaml"
    path.write_text(text)
    return path


def cached(path: Path):
    return sitecache.load(path, sites.find_site)


def test_a_loaded_site_is_answered_from_the_cache_until_its_file_changes(tmp_path, cache):
    path = site_file(tmp_path, "s", BASE + "description: one\n")
    first = sites.load_site("s")
    assert cached(path) == first and oct(cache.stat().st_mode & 0o777) == "0o700"
    # Rewritten at once, same size: the content decides, not the clock.
    path.write_text(BASE + "description: two\n")
    assert cached(path) is None and sites.load_site("s").description == "two"
    assert cached(path).description == "two"


def test_an_extends_name_that_now_resolves_elsewhere_is_a_miss(tmp_path, cache, monkeypatch):
    site_file(tmp_path, "base", BASE + "description: first\n")
    child = site_file(tmp_path, "child", "extends: base\n")
    assert sites.load_site("child").description == "first"
    other = tmp_path / "other"
    other.mkdir()
    (other / "base.yaml").write_text(BASE + "description: second\n")
    monkeypatch.setenv("SLURMTORCH_SITE_PATH", f"{other}{os.pathsep}{tmp_path / 'sites'}")
    assert cached(child) is None and sites.load_site("child").description == "second"


def test_errors_are_never_cached(tmp_path, cache):
    path = site_file(tmp_path, "bad", BASE + "launcher: nope\n")
    for _ in range(2):
        with pytest.raises(SiteError, match="launcher"):
            sites.load_site("bad")
    assert cached(path) is None


def test_an_entry_naming_another_class_is_refused(tmp_path, cache):
    path = site_file(tmp_path, "s", BASE)
    sites.load_site("s")
    (entry,) = cache.iterdir()
    fmt, key, valid_for, _ = pickle.loads(entry.read_bytes())
    entry.write_bytes(pickle.dumps((fmt, key, valid_for, Path("/"))))  # a class outside the site model
    assert cached(path) is None and sites.load_site("s").name == "s"


def test_a_cache_others_can_write_is_not_used(tmp_path, cache):
    path = site_file(tmp_path, "s", BASE)
    sites.load_site("s")
    cache.chmod(0o777)
    assert sitecache.folder() is None and cached(path) is None


def test_the_cache_can_be_turned_off(tmp_path, cache, monkeypatch):
    path = site_file(tmp_path, "s", BASE)
    monkeypatch.setenv("SLURMTORCH_NO_SITE_CACHE", "1")
    sites.load_site("s")
    assert cached(path) is None and not cache.exists()


def test_a_cached_site_loads_without_pyyaml(tmp_path, cache):
    site_file(tmp_path, "s", BASE)
    sites.load_site("s")
    code = ("import sys; from slurmtorch.submit import sites; site = sites.load_site('s'); "
            "print(site.name, 'yaml' in sys.modules)")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "SLURMTORCH_SITE_PATH": str(tmp_path / "sites")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["s", "False"]
