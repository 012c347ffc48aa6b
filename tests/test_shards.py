"""The CI shards: every file in exactly one, balanced by time, the same split every run."""

import pytest

import shards


def test_every_file_lands_in_exactly_one_shard_and_the_loads_are_close():
    seconds = {f"tests/t{i}.py": float(s) for i, s in enumerate([375, 205, 157, 119, 115, 109, 50, 20, 5, 1])}
    got = shards.assign(seconds, 2)
    assert set(got) == set(seconds) and set(got.values()) == {1, 2}
    load = [sum(s for p, s in seconds.items() if got[p] == k) for k in (1, 2)]
    assert abs(load[0] - load[1]) < 0.05 * sum(seconds.values())


def test_the_split_does_not_depend_on_the_order_files_were_collected_in():
    seconds = {"tests/b.py": 10.0, "tests/a.py": 10.0, "tests/c.py": 3.0}
    assert shards.assign(seconds, 2) == shards.assign(dict(reversed(list(seconds.items()))), 2)


def test_an_unmeasured_file_is_estimated_from_its_tests():
    assert shards.estimate("tests/new.py", testbed_tests=2, other_tests=50) == pytest.approx(11.0)
    assert shards.estimate("tests/submit/test_recovery.py", 0, 0) == shards.MEASURED_S["tests/submit/test_recovery.py"]


@pytest.mark.parametrize("text", ["", "2", "0/2", "3/2", "a/b", "1/0", "-1/2"])
def test_a_bad_shard_is_refused_with_what_was_expected(text):
    with pytest.raises(ValueError, match="expected K/N"):
        shards.parse(text)


def test_a_good_shard_is_read():
    assert shards.parse("2/3") == (2, 3)
