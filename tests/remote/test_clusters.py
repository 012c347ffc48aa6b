"""The user's clusters file: where it is looked for, what an entry becomes, and each mistake
reported as file:line: key path: problem, with its fix."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from slurmtorch import shell
from slurmtorch.errors import ClusterError
from slurmtorch.remote import clusters
from slurmtorch.remote.clusters import Cluster

EXAMPLE = """\
# ~/.config/slurmtorch/clusters.yaml
alps:
  host: ela                # the SSH destination
  site: cscs-alps          # the site config to use on the cluster
  venv: /users/me/st-venv  # where slurmtorch is installed on the cluster
  # python: python3
  modules: [cray-python]   # loaded first
  workdir: /capstor/scratch/cscs/me/slurmtorch
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "clusters.yaml"
    p.write_text(text)
    return p


def refusal(tmp_path: Path, text: str) -> ClusterError:
    with pytest.raises(ClusterError) as info:
        clusters.load(write(tmp_path, text))
    return info.value


def only_problem(tmp_path: Path, text: str) -> tuple[str, str | None]:
    """The one problem of a file with one mistake, as (message, tip); load raises the same."""
    problems = clusters.check(write(tmp_path, text))
    assert len(problems) == 1, problems
    err = refusal(tmp_path, text)
    assert (err.message, err.tip) == problems[0]
    return problems[0]


# ---------------------------------------------------------------- what an entry becomes


def test_the_documented_example_loads_with_every_key(tmp_path):
    f = write(tmp_path, EXAMPLE)
    assert clusters.load(f) == {"alps": Cluster(
        name="alps", host="ela", site="cscs-alps", python="/users/me/st-venv/bin/python",
        modules=("cray-python",), workdir="/capstor/scratch/cscs/me/slurmtorch", source=str(f))}


def test_the_docs_show_the_example_that_loads(tmp_path):
    doc = (Path(__file__).resolve().parents[2] / "docs" / "remote.md").read_text()
    block = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    loaded = clusters.load(write(tmp_path, block))
    assert loaded["alps"].python == "/users/me/st-venv/bin/python"
    assert loaded["alps"].workdir == "/capstor/scratch/cscs/me/slurmtorch"


def test_only_host_is_required_and_python_defaults_to_python3(tmp_path):
    c = clusters.load(write(tmp_path, "mini: {host: login.example.org}\n"))["mini"]
    assert (c.host, c.site, c.python, c.modules, c.workdir) == ("login.example.org", None, "python3", (), None)


def test_an_interpreter_is_kept_as_named(tmp_path):
    loaded = clusters.load(write(tmp_path, "a: {host: a, python: python3.11}\n"
                                           "b: {host: b, python: /opt/py/bin/python3}\n"))
    assert (loaded["a"].python, loaded["b"].python) == ("python3.11", "/opt/py/bin/python3")


def test_paths_under_the_clusters_home_are_kept_for_the_cluster_to_expand(tmp_path):
    c = clusters.load(write(tmp_path, "x: {host: x, venv: ~/st-venv/, workdir: ~/scratch/st}\n"))["x"]
    assert (c.python, c.workdir) == ("~/st-venv/bin/python", "~/scratch/st")


def test_user_at_host_and_an_ssh_uri_are_destinations(tmp_path):
    loaded = clusters.load(write(tmp_path, "a: {host: me@ela.cscs.ch}\nb: {host: 'ssh://me@login:2222'}\n"))
    assert (loaded["a"].host, loaded["b"].host) == ("me@ela.cscs.ch", "ssh://me@login:2222")


def test_every_value_reads_back_through_a_shell_byte_for_byte(tmp_path):
    c = clusters.load(write(tmp_path, "x:\n  host: me@ela\n  workdir: \"/scratch/my runs/it's\"\n"
                                      "  modules: ['PrgEnv-gnu', 'cudatoolkit/12.4']\n"))["x"]
    values = [c.host, c.python, c.workdir, *c.modules]
    script = "printf '%s\\0' " + shell.join(values)
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True).stdout
    assert out.decode().split("\0")[:-1] == values


def test_an_empty_file_has_no_clusters(tmp_path):
    assert clusters.load(write(tmp_path, "# nothing yet\n")) == {}


# ---------------------------------------------------------------- where the file is


def test_the_file_is_under_the_home_config_folder_by_default():
    assert clusters.path({"HOME": "/home/me"}) == Path("/home/me/.config/slurmtorch/clusters.yaml")


def test_xdg_config_home_moves_the_file():
    env = {"HOME": "/home/me", "XDG_CONFIG_HOME": "/cfg"}
    assert clusters.path(env) == Path("/cfg/slurmtorch/clusters.yaml")


@pytest.mark.parametrize("value", ["", "relative/cfg"])
def test_an_empty_or_relative_xdg_config_home_is_ignored_as_the_spec_says(value):
    env = {"HOME": "/home/me", "XDG_CONFIG_HOME": value}
    assert clusters.path(env) == Path("/home/me/.config/slurmtorch/clusters.yaml")


def test_slurmtorch_clusters_names_the_file_itself():
    env = {"HOME": "/home/me", "XDG_CONFIG_HOME": "/cfg", "SLURMTORCH_CLUSTERS": "/etc/team/clusters.yaml"}
    assert clusters.path(env) == Path("/etc/team/clusters.yaml")
    assert clusters.path({**env, "SLURMTORCH_CLUSTERS": "~/c.yaml"}) == Path("/home/me/c.yaml")


def test_load_and_find_read_the_file_the_environment_names(tmp_path):
    env = {"HOME": "/nonexistent", "SLURMTORCH_CLUSTERS": str(write(tmp_path, EXAMPLE))}
    assert list(clusters.load(environ=env)) == ["alps"]
    assert clusters.find("alps", env).host == "ela"


def test_the_variable_that_picks_a_cluster_is_named():
    assert clusters.ENV == "SLURMTORCH_CLUSTER"


# ---------------------------------------------------------------- the file as a whole


def test_no_file_says_where_it_looked_and_shows_a_minimal_entry(tmp_path):
    with pytest.raises(ClusterError) as info:
        clusters.find("alps", {"HOME": str(tmp_path)})
    err = info.value
    assert err.message == (f"no clusters file at {tmp_path}/.config/slurmtorch/clusters.yaml "
                           "(the default; set $SLURMTORCH_CLUSTERS to use another file)")
    assert "`alps: {host: ela}`" in err.tip
    assert err.exit_code == 2 and err.render().count("\n") == 1


def test_no_file_where_the_variable_points_names_the_variable(tmp_path):
    with pytest.raises(ClusterError, match=r"no clusters file at .*/gone\.yaml \(named by \$SLURMTORCH_CLUSTERS\)"):
        clusters.load(environ={"SLURMTORCH_CLUSTERS": str(tmp_path / "gone.yaml")})


def test_a_folder_where_the_file_should_be_is_named(tmp_path):
    with pytest.raises(ClusterError, match=r"clusters file .* is a directory, not a file \(named by"):
        clusters.load(environ={"SLURMTORCH_CLUSTERS": str(tmp_path)})


def test_a_yaml_syntax_error_names_its_line(tmp_path):
    err = refusal(tmp_path, "alps:\n  host: ela\n  modules: [cray-python\n")
    assert err.message.startswith(f"{tmp_path}/clusters.yaml:4: YAML syntax error")
    assert err.tip == "check indentation and quoting near that line"


def test_a_key_given_twice_is_refused_as_a_cluster_error(tmp_path):
    err = refusal(tmp_path, "alps:\n  host: ela\n  host: ela2\n")
    assert type(err) is ClusterError
    assert err.message == f"{tmp_path}/clusters.yaml:3: duplicate key 'host'"


def test_a_top_level_that_is_not_a_mapping_is_refused(tmp_path):
    err = refusal(tmp_path, "- alps\n- daint\n")
    assert err.message == (f"{tmp_path}/clusters.yaml: top level: "
                           "expected a mapping of cluster names to entries, got a list")
    assert "`alps: {host: ela}`" in err.tip


def test_every_problem_is_collected_and_the_first_raised_with_the_count(tmp_path):
    text = "a:\n  hots: x\nb: {host: -x}\nc: {host: c, venv: v}\n"
    problems = clusters.check(write(tmp_path, text))
    assert [m.split(": ", 2)[1] for m, _ in problems] == ["a", "a.hots", "b.host", "c.venv"]
    assert [m.split(":")[1] for m, _ in problems] == ["1", "2", "3", "4"]
    err = refusal(tmp_path, text)
    assert err.message == problems[0][0] + " (and 3 more)"
    assert err.tip == problems[0][1]


def test_a_good_entry_beside_a_bad_one_still_refuses_the_file(tmp_path):
    with pytest.raises(ClusterError):
        clusters.find("alps", {"SLURMTORCH_CLUSTERS": str(write(tmp_path, EXAMPLE + "bad: {host: ''}\n"))})


# ---------------------------------------------------------------- one entry


def test_an_entry_that_is_not_a_mapping_is_refused(tmp_path):
    message, tip = only_problem(tmp_path, "alps: ela\n")
    assert message == f"{tmp_path}/clusters.yaml:1: alps: expected a mapping of keys, got str"
    assert tip.startswith("e.g. `alps: {host: login.example.org}`")


def test_an_unknown_key_suggests_the_close_one(tmp_path):
    message, tip = only_problem(tmp_path, "alps:\n  host: ela\n  hots: ela\n")
    assert message == f"{tmp_path}/clusters.yaml:3: alps.hots: unknown key"
    assert tip == ("did you mean 'host'? valid keys here: "
                   "'host', 'site', 'venv', 'python', 'modules', 'workdir'")


def test_a_missing_host_is_named_at_its_entry(tmp_path):
    message, tip = only_problem(tmp_path, "alps: {host: ela}\ndaint:\n  site: cscs-alps\n")
    assert message == f"{tmp_path}/clusters.yaml:2: daint: missing required key 'host'"
    assert tip.startswith("add `host:` (the SSH destination")


@pytest.mark.parametrize("value, problem", [
    ("''", "is empty"),
    ("123", "expected a string, got int"),
    ("'ela -p 2222'", "'ela -p 2222' contains whitespace: ssh takes one destination"),
    ("-oProxyCommand=touch%x", "'-oProxyCommand=touch%x' starts with '-', which ssh would read as an option"),
    ("'ela;reboot'", "';' in the host name, which ssh refuses"),
    ("'$(id)@ela'", "'(' in the user name, which ssh refuses"),
    ("me@", "'me@' has an empty user or host name"),
])
def test_a_host_ssh_could_not_take_as_one_destination_is_refused(tmp_path, value, problem):
    message, tip = only_problem(tmp_path, f"alps:\n  host: {value}\n")
    assert message.startswith(f"{tmp_path}/clusters.yaml:2: alps.host: ")
    assert problem in message
    assert tip


@pytest.mark.parametrize("value", ["../sites/mine.yaml", "-x", ".hidden", "'cscs alps'", "true"])
def test_a_site_that_is_not_a_site_name_is_refused(tmp_path, value):
    message, tip = only_problem(tmp_path, f"alps:\n  host: ela\n  site: {value}\n")
    assert message.startswith(f"{tmp_path}/clusters.yaml:3: alps.site: ")
    assert "names are letters, digits" in tip or "e.g. site: cscs-alps" in tip


def test_venv_and_python_together_are_refused(tmp_path):
    message, tip = only_problem(tmp_path, "alps:\n  host: ela\n  venv: /v\n  python: python3\n")
    assert message == f"{tmp_path}/clusters.yaml:4: alps.python: give venv or python, not both"
    assert "bin/python" in tip


@pytest.mark.parametrize("key, value, problem", [
    ("venv", "st-venv", "'st-venv' is not an absolute path"),
    ("workdir", "scratch/me", "'scratch/me' is not an absolute path"),
    ("workdir", "~me/scratch", "'~me/scratch' is not an absolute path"),
    ("workdir", "/scratch/$USER/st", "'/scratch/$USER/st': variables are not expanded"),
    ("venv", "~", "'~' is not an absolute path"),
])
def test_a_folder_that_is_not_absolute_or_under_home_is_refused(tmp_path, key, value, problem):
    message, tip = only_problem(tmp_path, f"alps:\n  host: ela\n  {key}: '{value}'\n")
    assert message == f"{tmp_path}/clusters.yaml:3: alps.{key}: {problem}"
    assert "~/" in tip


def test_a_venv_that_names_its_interpreter_is_refused_with_both_fixes(tmp_path):
    message, tip = only_problem(tmp_path, "alps:\n  host: ela\n  venv: /users/me/st-venv/bin/python3\n")
    assert message == (f"{tmp_path}/clusters.yaml:3: alps.venv: "
                       "'/users/me/st-venv/bin/python3' is an interpreter, not a venv's folder")
    assert tip == "write venv: /users/me/st-venv, or python: /users/me/st-venv/bin/python3 instead"


@pytest.mark.parametrize("value", ["bin/python", "'python3 -I'", "-c"])
def test_a_python_that_is_neither_a_path_nor_a_command_name_is_refused(tmp_path, value):
    message, tip = only_problem(tmp_path, f"alps:\n  host: ela\n  python: {value}\n")
    assert message.startswith(f"{tmp_path}/clusters.yaml:3: alps.python: ")
    assert "neither an absolute path nor a command name" in message
    assert "python3.11" in tip


def test_modules_given_as_one_string_are_refused_with_the_list_form(tmp_path):
    message, tip = only_problem(tmp_path, "alps:\n  host: ela\n  modules: cray-python\n")
    assert message == f"{tmp_path}/clusters.yaml:3: alps.modules: expected a list of strings"
    assert tip == "write it as a list: modules: [cray-python]"


@pytest.mark.parametrize("value, index", [("['']", 0), ("[a, 'b c']", 1), ("[--force]", 0), ('[a, "b\\tc"]', 1)])
def test_a_module_that_is_not_one_word_is_refused(tmp_path, value, index):
    message, tip = only_problem(tmp_path, f"alps:\n  host: ela\n  modules: {value}\n")
    assert message.startswith(f"{tmp_path}/clusters.yaml:3: alps.modules[{index}]: ")
    assert "is not one module name" in message


@pytest.mark.parametrize("name", ["-x", ".x", "'a b'", "a/b", "'a\\nb'"])
def test_a_cluster_name_that_is_not_a_plain_word_is_refused(tmp_path, name):
    message, tip = only_problem(tmp_path, f'"{name.strip(chr(39))}": {{host: ela}}\n')
    assert message.startswith(f"{tmp_path}/clusters.yaml:1: ")
    assert "invalid cluster name" in message and "\n" not in message
    assert tip == clusters.NAME_RULE


@pytest.mark.parametrize("name, label, got", [("123", "123", "int"), ("on", "True", "bool"), ("null", "None", "null")])
def test_a_cluster_name_yaml_reads_as_another_type_is_refused_with_the_quoted_form(tmp_path, name, label, got):
    message, tip = only_problem(tmp_path, f"{name}: {{host: ela}}\n")
    assert message == f"{tmp_path}/clusters.yaml:1: {label}: expected a cluster name, got {got}"
    assert tip.startswith("quote the name")


@pytest.mark.parametrize("key, value", [("host", '"ela\\nreboot"'), ("workdir", '"/scratch/a\\rb"'),
                                        ("site", '"cscs\\x1b[2J"'), ("python", '"python3\\x00"')])
def test_a_value_with_a_newline_or_control_character_is_refused_on_one_line(tmp_path, key, value):
    message, tip = only_problem(tmp_path, f"alps:\n  host: ela\n  {key}: {value}\n" if key != "host"
                                else f"alps:\n  host: {value}\n")
    assert message.startswith(f"{tmp_path}/clusters.yaml:")
    assert "a newline or control character" in message and "\n" not in message and "\r" not in message
    assert tip == "write the value on one line, as plain text"


# ---------------------------------------------------------------- find


def test_find_of_an_unknown_name_lists_the_known_ones(tmp_path):
    env = {"SLURMTORCH_CLUSTERS": str(write(tmp_path, "alps: {host: ela}\ndaint: {host: daint}\n"))}
    with pytest.raises(ClusterError) as info:
        clusters.find("alsp", env)
    assert info.value.message == f"unknown cluster 'alsp' in {tmp_path}/clusters.yaml"
    assert info.value.tip == "did you mean 'alps'? valid clusters: 'alps', 'daint'"


def test_find_in_a_file_without_clusters_shows_a_minimal_entry(tmp_path):
    with pytest.raises(ClusterError) as info:
        clusters.find("alps", {"SLURMTORCH_CLUSTERS": str(write(tmp_path, ""))})
    assert info.value.message == f"unknown cluster 'alps': {tmp_path}/clusters.yaml names no clusters"
    assert "`alps: {host: ela}`" in info.value.tip
