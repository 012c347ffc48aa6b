"""Stacks (issue 26): the rank's handler, the parser, the grouping, the flight recorder's summary."""

from __future__ import annotations

import os
import pickle
import resource
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from slurmtorch import protocol
from slurmtorch import rankfiles
from slurmtorch.bootstrap import flightrecorder, native
from slurmtorch.errors import SpecError
from slurmtorch.rankfiles import Frame, Native, RankStacks, ThreadStack
from slurmtorch.submit.jobfolder import flightdump
from slurmtorch.submit.follow import stackrequest
from slurmtorch.submit.launch.preemption import parse_signal
from slurmtorch.submit.jobfolder.stacks import (Silent, detail_lines, native_notes, ranges, short_name, summary,
                                                summary_lines)

REPO = Path(__file__).resolve().parent.parent.parent
TORCH = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
C10D_LOGGER = "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py"
BOOT = "/repo/slurmtorch/bootstrap/target.py"


def rank(r: int, frames: tuple, host: str = "node1") -> RankStacks:
    return RankStacks(r, host, 100 + r, 0x10, (ThreadStack(0x20, False, (Frame("/x/threading.py", 1, "wait"),)),
                                               ThreadStack(0x10, True, frames)))


WAITING = (Frame(TORCH, 2800, "all_reduce"), Frame(C10D_LOGGER, 81, "wrapper"), Frame("/home/u/train.py", 42, "step"),
           Frame("/home/u/train.py", 50, "<module>"), Frame(BOOT, 30, "run_target"))
LOADING = (Frame("/home/u/data.py", 88, "__next__"), Frame("/home/u/train.py", 48, "<module>"), Frame(BOOT, 30, "run_target"))


def test_a_dump_reads_back_with_its_header_and_the_main_thread_found():
    text = rankfiles.stacks_header(5, "node3", 4242, 0x7f00) + textwrap.dedent('''\
        Thread 0x00000000000000aa (most recent call first):
          File "/usr/lib/python3.11/threading.py", line 324 in wait

        Current thread 0x0000000000007f00 (most recent call first):
          File "/home/u/data.py", line 88 in __next__
          File "/home/u/train.py", line 48 in <module>
        ''')
    got = rankfiles.parse_stacks(text)
    assert (got.rank, got.host, got.pid) == (5, "node3", 4242)
    assert got.main_thread().frames == (Frame("/home/u/data.py", 88, "__next__"), Frame("/home/u/train.py", 48, "<module>"))
    assert rankfiles.parse_stacks("") is None and rankfiles.parse_stacks("Thread 0x1 (most recent call first):") is None


def test_of_two_dumps_in_a_row_the_last_is_read():
    one = 'Current thread 0x0000000000000010 (most recent call first):\n  File "/a.py", line 1 in f\n'
    two = 'Current thread 0x0000000000000010 (most recent call first):\n  File "/a.py", line 2 in g\n'
    got = rankfiles.parse_stacks(rankfiles.stacks_header(0, "n", 1, 0x10) + one + two)
    assert got.main_thread().frames == (Frame("/a.py", 2, "g"),)


def test_a_stack_reads_as_where_it_stands_and_the_users_line_that_led_there():
    assert summary(WAITING) == "all_reduce <- train.py:42 step()"
    assert summary(LOADING) == "data.py:88 __next__()"
    assert summary(()) .startswith("no Python frame")


def test_ranks_on_one_stack_are_grouped_and_the_odd_ones_out_come_first():
    stacks = {r: rank(r, WAITING, f"node{r // 2 + 1}") for r in range(8) if r != 5}
    stacks[5] = rank(5, LOADING, "node3")
    assert summary_lines(stacks) == ["rank 5 on node3: data.py:88 __next__()",
                                     "ranks 0-4,6-7 (7): all_reduce <- train.py:42 step()"]
    details = detail_lines(stacks)
    assert details[0] == "rank 5 on node3, main thread (most recent call last):"
    assert details[-1] == f'  File "{TORCH}", line 2800, in all_reduce'


def test_a_dead_rank_is_named_dead_before_the_groups():
    stacks = {r: rank(r, WAITING) for r in range(8) if r != 5}
    lines = summary_lines(stacks, [Silent(5, "node3", "dead (its process is gone)")])
    assert lines == ["rank 5 on node3: dead (its process is gone)", "ranks 0-4,6-7 (7): all_reduce <- train.py:42 step()"]


def test_ranges_are_compact():
    assert ranges([7, 0, 1, 2, 4, 6]) == "0-2,4,6-7"
    assert ranges([3]) == "3"


def test_the_stacks_signal_cannot_be_the_preemption_signal():
    with pytest.raises(SpecError, match="slurmtorch stacks"):
        parse_signal("WINCH@60")
    assert parse_signal("USR1@60") == "USR1@60"


# --------------------------------------------------------------------------- a real rank process

RANK = textwrap.dedent('''\
    import os, sys, time
    from slurmtorch.bootstrap import stacks
    assert stacks.install(0, "nodeX")
    def loader():
        print("ready", flush=True)
        time.sleep(60)
    loader()
''')


def start_rank(tmp_path, code: str = RANK, argv0: tuple = (sys.executable,), **env) -> subprocess.Popen:
    environ = {**os.environ, protocol.JOB_DIR: str(tmp_path), "PYTHONPATH": str(REPO), **env}
    proc = subprocess.Popen([*argv0, "-c", code], env=environ, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    return proc


@pytest.fixture
def rank_process(tmp_path):
    proc = start_rank(tmp_path)
    yield proc
    proc.kill()
    proc.wait()


def test_a_rank_blocked_in_a_sleep_writes_its_stack_on_the_signal(rank_process, tmp_path):
    # The wait ends as soon as the rank has answered; 60 s only bounds a broken handler.
    got, silent = stackrequest.ask(tmp_path, 1, lambda: os.kill(rank_process.pid, protocol_signal()), wait_s=60)
    assert silent == [] and got[0].host == "nodeX" and got[0].pid == rank_process.pid
    assert [f.function for f in got[0].main_thread().frames] == ["loader", "<module>"]  # in loader from "ready" on
    assert rank_process.poll() is None  # the signal left it running


def test_a_request_leaves_the_end_file_the_rank_holds_open(rank_process, tmp_path):
    """A rank writes its last stacks to rank-R.end.txt as it ends, through a descriptor it
    opened at its start: a request must not remove that file (it did: the glob rank-*.txt)."""
    end = tmp_path / protocol.STACKS / protocol.end_stacks_name(0)
    assert end.exists()
    stackrequest.ask(tmp_path, 1, lambda: os.kill(rank_process.pid, protocol_signal()), wait_s=60)
    assert end.exists()
    rank_process.terminate()
    rank_process.wait()
    assert rankfiles.parse_stacks(end.read_text()).main_thread().frames[0].function == "loader"


# --------------------------------------------------------------------------- native frames (py-spy)

def ask_natives(proc, folder):
    got, _ = stackrequest.ask(folder, 1, lambda: os.kill(proc.pid, protocol_signal()), wait_s=60, native=True)
    natives, late = stackrequest.natives(folder, [0], wait_s=120)
    assert late == []
    return got, natives[0]


def test_where_py_spy_is_installed_a_rank_adds_its_native_frames(rank_process, tmp_path):
    # scripts/setup pins py-spy in the test venv, beside sys.executable, where the rank looks first.
    assert native.find(os.environ)[0] == os.path.join(os.path.dirname(sys.executable), "py-spy")
    stackrequest.ask(tmp_path, 1, lambda: os.kill(rank_process.pid, protocol_signal()), wait_s=60)
    assert stackrequest.natives(tmp_path, [0], wait_s=3) == ({}, [0])  # not asked for (the supervisor's request)
    got, mixed = ask_natives(rank_process, tmp_path)
    assert mixed.why == "" and mixed.pid == rank_process.pid
    frames = mixed.frames(got[0].main)
    assert [f.function for f in frames if not f.native][:2] == ["loader", "<module>"]
    assert frames[0].native  # inside the sleep, below Python: libc's
    lines = detail_lines(got, native={0: mixed})
    assert lines[0] == "rank 0 on nodeX, main thread (most recent call last, native frames by py-spy):"
    assert lines[-1].startswith("  [native] ") and not any("[native] 0x" in ln for ln in lines)


def test_without_py_spy_a_rank_says_why_once_and_its_python_stacks_stand(tmp_path):
    """A python with no py-spy beside it and none on PATH; then one turned off; then one that
    cannot trace the rank (not dumpable, no CAP_SYS_PTRACE: what Yama's modes 2-3 or a
    container refuse in the same way)."""
    base = getattr(sys, "_base_executable", sys.executable)
    cases = [((base,), {"PATH": "/usr/bin:/bin"}, "py-spy is not installed where the ranks run (pip install py-spy)"),
             ((sys.executable,), {protocol.PY_SPY: "0"}, "turned off (SLURMTORCH_PY_SPY=0)")]
    if os.geteuid() == 0:
        cases.append((("setpriv", "--bounding-set", "-sys_ptrace", "--inh-caps", "-sys_ptrace", sys.executable), {},
                      "ptrace is not permitted here"))
    else:
        cases.append(((sys.executable,), {}, "ptrace is not permitted here"))
    undumpable = RANK.replace("def loader():", "import ctypes\nctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE\n"
                                                "def loader():")
    for i, (argv0, env, why) in enumerate(cases):
        folder = tmp_path / str(i)
        proc = start_rank(folder, undumpable if "ptrace" in why else RANK, argv0, **env)
        try:
            got, mixed = ask_natives(proc, folder)
        finally:
            proc.kill()
            proc.wait()
        assert mixed.threads == () and mixed.why.startswith(why), mixed.why
        assert detail_lines(got, native={0: mixed})[1:] == detail_lines(got)[1:]  # the Python stack alone
    notes = native_notes({0: Native(0, 1, why="no py-spy"), 1: Native(1, 2, why="no py-spy"), 3: Native(3, 4)}, [2], 30)
    assert notes == ["native frames: none from ranks 0-1: no py-spy; Python stacks only",
                     "native frames: none from rank 2: py-spy had not answered within 30 s (--native-wait-s); "
                     "Python stacks only"]


def test_py_spys_refusals_read_as_one_line():
    assert native.refusal("Permission Denied: Try running again with elevated permissions\n", 1, 2) == (
        "ptrace is not permitted here (kernel.yama.ptrace_scope=2): Permission Denied: Try running again with "
        "elevated permissions")
    assert native.refusal("\nError: Failed to find python version\n", 1, None) == (
        "py-spy failed: Error: Failed to find python version")
    assert native.refusal("", 3, None) == "py-spy failed: exit 3"


def test_native_frames_read_back_and_cpp_names_are_cut_to_their_path():
    dump = ('[{"thread_id": 16, "frames": [{"name": "c10d::Work::wait", "filename": "/v/libtorch_cpu.so", '
            '"module": "/v/libtorch_cpu.so", "short_filename": "libtorch_cpu.so", "line": 0}, '
            '{"name": "step", "filename": "/home/u/train.py", "module": null, "line": 42}]}]')
    n = rankfiles.parse_native(rankfiles.native_header(3, 99) + dump)
    assert n.frames(16) == (Frame("libtorch_cpu.so", 0, "c10d::Work::wait", native=True), Frame("/home/u/train.py", 42, "step"))
    assert rankfiles.parse_native(rankfiles.native_header(3, 99) + "unavailable: no py-spy\n").why == "no py-spy"
    assert rankfiles.parse_native(rankfiles.native_header(3, 99) + "[{").why == "py-spy said something unreadable"
    assert rankfiles.parse_native("") is None
    assert short_name("f<std::vector<int, a<b> >, c>(std::string const&, g<(long)1>)::{lambda(int)#1}::_FUN") == (
        "f<>()::{lambda()#1}::_FUN")
    assert short_name("operator<<") == "operator<<"


def test_a_rank_without_an_alive_file_is_awaited_as_not_started(rank_process, tmp_path):
    _, silent, waiting = stackrequest.collect(tmp_path, 2)
    assert silent == [] and waiting == [(0, "nodeX", "no answer (its process lives; the interpreter is held by C code?)"),
                                        (1, "", "not started (still starting, or never did)")]


def test_a_rank_whose_process_is_gone_is_dead_not_unanswering(rank_process, tmp_path):
    rank_process.kill()
    rank_process.wait()
    got, silent = stackrequest.ask(tmp_path, 1, lambda: None, wait_s=60)  # answered at once: no waiting
    assert silent == [Silent(0, "nodeX", "dead (its process is gone)")] and got == {}


def test_a_rank_whose_script_returned_is_named_exited(rank_process, tmp_path):
    rank_process.kill()
    rank_process.wait()
    (tmp_path / protocol.exit_note_name(0)).write_text(rankfiles.exit_line(0, "nodeX", 0, 0))
    _, silent, _ = stackrequest.collect(tmp_path, 1)
    assert silent == [Silent(0, "nodeX", "exited 0 (its script returned)")]


def test_a_live_rank_holds_its_alive_lock(rank_process, tmp_path):
    assert stackrequest.is_alive(tmp_path / protocol.STACKS / protocol.alive_name(0)) is True
    assert stackrequest.is_alive(tmp_path / protocol.STACKS / protocol.alive_name(1)) is None


def protocol_signal() -> int:
    return getattr(signal, f"SIG{protocol.STACKS_SIGNAL}")


# --------------------------------------------------------------------------- the flight recorder

def test_nccl_jobs_get_the_flight_recorder_dumping_into_the_job_folder():
    env = flightrecorder.env_for("nccl", {protocol.JOB_DIR: "/jobs/42"}, (2, 13))
    assert env == {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
                   "TORCH_FR_DUMP_TEMP_FILE": "/jobs/42/flight/rank-"}
    assert flightrecorder.env_for("cpu:gloo,cuda:nccl", {protocol.JOB_DIR: "/j"}, (2, 13))["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"


@pytest.mark.parametrize("version, names", [
    # torch 2.11 on an H200 printed, on every rank: "Warning: Environment variable
    # TORCH_NCCL_TRACE_BUFFER_SIZE is deprecated; use TORCH_FR_BUFFER_SIZE instead".
    ((2, 11), ("TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE")),
    ((2, 9), ("TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE")),
    ((2, 8), ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")),
])
def test_the_flight_recorder_is_switched_on_by_the_names_the_ranks_torch_reads_and_no_deprecated_one(version, names):
    env = flightrecorder.env_for("nccl", {protocol.JOB_DIR: "/j"}, version)
    assert sorted(env) == sorted((*names, "TORCH_NCCL_DUMP_ON_TIMEOUT"))


def test_the_torch_version_is_read_from_torchs_version_string():
    assert flightrecorder.torch_version("2.11.0+cu128") == (2, 11)
    assert flightrecorder.torch_version("2.9.0a0+git1234") == (2, 9)
    assert flightrecorder.torch_version("junk") == (0, 0)


def test_a_local_runs_nccl_ranks_dump_into_its_folder_where_slurmtorch_stacks_reads_them():
    env = flightrecorder.env_for("nccl", {protocol.LOCAL_RUN_DIR: "/home/u/.slurmtorch/local/3"}, (2, 13))
    assert env["TORCH_FR_DUMP_TEMP_FILE"] == "/home/u/.slurmtorch/local/3/flight/rank-"


@pytest.mark.parametrize("version", [(2, 8), (2, 11)])
@pytest.mark.parametrize("users", ["TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"])
def test_the_users_setting_of_either_name_wins(version, users):
    env = flightrecorder.env_for("nccl", {protocol.JOB_DIR: "/j", users: "500"}, version)
    assert not {"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"} & set(env)
    for dump in ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"):
        env = flightrecorder.env_for("nccl", {protocol.JOB_DIR: "/j", dump: "/mine/rank-"}, version)
        assert not {"TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"} & set(env)


def test_the_flight_recorder_keeps_what_the_user_set_and_stays_off_gloo_and_outside_jobs():
    env = flightrecorder.env_for("nccl", {protocol.JOB_DIR: "/j", "TORCH_NCCL_DUMP_ON_TIMEOUT": "0"}, (2, 13))
    assert "TORCH_NCCL_DUMP_ON_TIMEOUT" not in env
    assert flightrecorder.env_for("gloo", {protocol.JOB_DIR: "/j"}, (2, 13)) == {}
    assert flightrecorder.env_for("nccl", {}, (2, 13)) == {}


def entry(seq: int, op: str, state: str, record: int) -> dict:
    """One entry as torch's flight recorder dumps it (torch/distributed/flight_recorder/components/builder.py)."""
    return {"record_id": record, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": seq,
            "p2p_seq_id": 0, "op_id": seq, "profiling_name": f"nccl:{op}", "time_created_ns": 1000 * record,
            "input_sizes": [[4]], "input_dtypes": ["Float"], "output_sizes": [[4]], "output_dtypes": ["Float"],
            "state": state, "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
            "retired": state == "completed", "timeout_ms": 600000, "is_p2p": False, "frames": []}


def dump(entries: list) -> dict:
    return {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}},
            "pg_status": {}, "entries": entries}


def test_the_flight_recorder_summary_names_the_sequence_number_where_the_ranks_disagree(tmp_path):
    ahead = [entry(40, "all_reduce", "completed", 1), entry(41, "all_reduce", "completed", 2),
             entry(42, "all_reduce", "started", 3)]
    behind = ahead[:2]
    (tmp_path / protocol.FLIGHT).mkdir()
    for r in range(4):
        (tmp_path / protocol.FLIGHT / f"rank-{r}").write_bytes(pickle.dumps(dump(behind if r == 2 else ahead)))
    lines = flightdump.summary_lines(flightdump.load_folder(tmp_path), ranks=5)
    assert lines == [
        "flight recorder (group 0): rank 2 entered all_reduce #41, completed #41; "
        "ranks 0-1,3 entered all_reduce #42, completed #41",
        "flight recorder (group 0): the ranks disagree at #42: rank 2 never entered it",
        "flight recorder: no dump from rank 4",
    ]


def test_a_flight_dump_holding_objects_is_not_unpickled(tmp_path):
    path = tmp_path / "rank-0"
    path.write_bytes(pickle.dumps({"entries": [], "x": Path("/")}))
    assert flightdump.load(path) == "not a dump (UnpicklingError)"
    assert flightdump.load(tmp_path / "rank-1") is None
    assert flightdump.summary_lines({}) == []


def test_the_supervisors_stacks_show_under_the_restarts(tmp_path):
    from slurmtorch.submit.jobfolder import story
    from slurmtorch.submit.jobfolder.report import restart_lines

    (tmp_path / protocol.STACKS).mkdir()
    lines = ["rank 5 on node3: data.py:88 __next__()", "ranks 0-4,6-7 (7): all_reduce <- train.py:42 step()"]
    (tmp_path / protocol.STACKS / protocol.SUMMARY).write_text(protocol.summary_text(0, lines))
    assert restart_lines(tmp_path, story.fold([]))[-3:] == ["stacks when start 0 hung:", f"  {lines[0]}",
                                                             f"  {lines[1]}"]
    assert protocol.parse_summary("garbage") is None


def test_the_ranks_are_asked_by_signal_number_and_the_batch_step_only_for_mpirun():
    from slurmtorch.submit.edge import scancel, srun

    calls = []
    scancel.send_stacks_signal("42", runner=lambda argv, **kw: calls.append(argv))
    scancel.send_stacks_signal("43", True, runner=lambda argv, **kw: calls.append(argv))
    number = str(int(signal.SIGWINCH))
    assert calls == [["scancel", f"--signal={number}", "42"],
                     ["scancel", f"--signal={number}", "43"], ["scancel", f"--signal={number}", "--batch", "43"]]
    calls.clear()  # the ranks a job-wide signal missed: by pid, one overlapping one-task step per node
    srun.signal_pids("43", {"node2": [7], "node1": [5, 6]}, runner=lambda argv, **kw: calls.append(argv))
    kill = ["sh", "-c", srun._KILL_IF_THE_JOBS.format(number=number), "sh"]  # the job's own pids only
    assert calls == [["srun", "--overlap", "--jobid=43", "--nodelist=node1", "--nodes=1", "--ntasks=1", "--quiet",
                      *kill, "43", "5", "6"],
                     ["srun", "--overlap", "--jobid=43", "--nodelist=node2", "--nodes=1", "--ntasks=1", "--quiet",
                      *kill, "43", "7"]]
    calls.clear()  # an array task: srun wants its own job id (testbed: 'Invalid numeric value "1_1" for --jobid')

    def runner(argv, **kw):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, "45\n" if argv[0] == "squeue" else "", "")
    srun.signal_pids("44_1", {"node1": [5]}, runner=runner)
    assert calls == [["squeue", "-h", "-j", "44_1", "-o", "%A"],
                     ["srun", "--overlap", "--jobid=45", "--nodelist=node1", "--nodes=1", "--ntasks=1", "--quiet",
                      *kill, "45", "5"]]


def test_ranks_the_signal_missed_are_signalled_again_by_pid(rank_process, tmp_path):
    resent = []

    def resend(pids):
        resent.append(pids)
        os.kill(pids["nodeX"][0], protocol_signal())

    got, silent = stackrequest.ask(tmp_path, 1, lambda: None, wait_s=60, resend=resend)  # the first signal lost
    assert resent == [{"nodeX": [rank_process.pid]}] and silent == [] and 0 in got


def test_stacks_of_a_bad_job_id_is_one_clear_line(tmp_path):
    env = {**os.environ, "SLURMTORCH_HOME": str(tmp_path), "PYTHONPATH": str(REPO)}
    for job, said in (("abc", "error: invalid job id 'abc'"), ("77", "error: no job folder with a job.json at")):
        out = subprocess.run([sys.executable, "-m", "slurmtorch", "stacks", job], env=env, capture_output=True, text=True)
        assert out.returncode != 0 and out.stderr.startswith(said) and "Traceback" not in out.stderr, out.stderr


@pytest.mark.parametrize("bad", [
    pickle.dumps({"entries": [{"collective_seq_id": "x", "process_group": ("0", "d"), "state": "completed"}]}),
    pickle.dumps({"entries": [{"collective_seq_id": 3, "profiling_name": 7, "process_group": [[1]]}, "junk", None]}),
    b"\x80\x04" + b"(" * 200_000,  # nested deeper than the unpickler's stack
    b"not a pickle at all",
    pickle.dumps(dump([entry(10 ** 5000, "all_reduce", "completed", 1)])),  # str() refuses over 4300 digits
    pickle.dumps(dump([entry(-1, "all_reduce", "completed", 1)])),
    pickle.dumps(dump([{**entry(40, "all_reduce", "completed", 1), "process_group": (10 ** 5000, "d")}])),
])
def test_a_malformed_flight_dump_is_one_line_and_the_other_ranks_still_show(tmp_path, bad):
    (tmp_path / protocol.FLIGHT).mkdir()
    (tmp_path / protocol.FLIGHT / "rank-0").write_bytes(pickle.dumps(dump([entry(40, "all_reduce", "completed", 1)])))
    (tmp_path / protocol.FLIGHT / "rank-1").write_bytes(bad)
    lines = flightdump.summary_lines(flightdump.load_folder(tmp_path), ranks=2)
    assert lines[0].startswith("flight recorder (group 0): rank 0 entered all_reduce #40, completed #40"), lines
    assert sum("rank 1" in line for line in lines) == 1, lines


def test_a_flight_dump_linked_to_an_endless_device_is_not_read(tmp_path):
    """A dump is read up to a bound and only from a plain file: /dev/zero and /dev/urandom never end."""
    (tmp_path / protocol.FLIGHT).mkdir()
    (tmp_path / protocol.FLIGHT / "rank-0").write_bytes(pickle.dumps(dump([entry(40, "all_reduce", "completed", 1)])))
    (tmp_path / protocol.FLIGHT / "rank-1").symlink_to("/dev/urandom")
    (tmp_path / protocol.FLIGHT / "rank-2").symlink_to("/dev/zero")
    code = ("import sys; from pathlib import Path; from slurmtorch.submit.jobfolder import flightdump; "
            "print('\\n'.join(flightdump.summary_lines(flightdump.load_folder(Path(sys.argv[1])), ranks=3)))")
    def bounded():  # before the fix, the read grew until this limit (or the timeout) stopped it
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, preexec_fn=bounded)
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and lines[0].startswith("flight recorder (group 0): rank 0 entered"), out
    assert [ln for ln in lines if "rank 1" in ln or "rank 2" in ln or "ranks 1-2" in ln] == [
        "flight recorder: ranks 1-2: not a plain file (a symbolic link)"], lines
