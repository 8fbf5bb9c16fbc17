"""alpyka_testing.warm_python: a script run from the warm helper sees what it would see run cold
(``python script.py``), and ends the same ways; what a fork cannot give runs cold."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from alpyka_testing import warm_python

_REPORT = textwrap.dedent("""
    import json, os, sys
    print(json.dumps({"argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(), "name": __name__,
                      "file": globals().get("__file__"), "env": os.environ.get("WARM_TEST"),
                      "in_path": os.environ["EXTRA"] in sys.path,
                      "builtins": sorted(k for k in globals() if not k.startswith("__")),
                      "warm": "torch" in sys.modules, "numba": "numba" in sys.modules,
                      "alpyka": any(m.split(".")[0] in ("portable", "inference") for m in sys.modules)}))
""")


def _both(argv, tmp_path, **env):
    full = {**os.environ, "WARM_TEST": "yes", "EXTRA": str(tmp_path / "extra"), **env}
    full["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "extra"), os.environ.get("PYTHONPATH", "")])
    warm = warm_python.run(argv, env=full, cwd=tmp_path, timeout=120)
    cold = subprocess.run([sys.executable, *argv], env=full, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    return warm, cold


@pytest.mark.parametrize("mode", ["script", "-m", "-c"])
def test_a_warm_child_sees_what_a_cold_one_sees(tmp_path, mode):
    pytest.importorskip("torch")
    (tmp_path / "extra").mkdir()
    (tmp_path / "report.py").write_text(_REPORT)
    argv = {"script": [str(tmp_path / "report.py"), "a", "b"], "-m": ["-m", "report", "a"], "-c": ["-c", _REPORT, "x"]}[
        mode
    ]
    warm, cold = _both(argv, tmp_path)
    assert warm.returncode == cold.returncode == 0, (warm.stderr, cold.stderr)
    w, c = json.loads(warm.stdout), json.loads(cold.stdout)
    # torch was imported before the fork
    assert w.pop("warm") is True, warm_python.cold_start_reason(dict(os.environ), warm_python._base_env())
    assert c.pop("warm") is False
    assert w == c
    assert not w["numba"] and not w["alpyka"]  # nothing of the library is imported before the fork


def test_a_warm_child_ends_as_the_interpreter_ends(tmp_path):
    script = tmp_path / "ends.py"
    script.write_text(
        textwrap.dedent("""
        import atexit, os, signal, sys, threading, time
        how = sys.argv[1]
        atexit.register(lambda: print("atexit ran", flush=True))
        if how == "thread":
            threading.Thread(target=lambda: (time.sleep(0.3), print("thread done"))).start()
        elif how == "exit":
            sys.exit(3)
        elif how == "raise":
            raise ValueError("boom")
        elif how == "signal":
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
    """)
    )
    for how, code, out, err in [
        ("thread", 0, "thread done\natexit ran\n", ""),
        ("exit", 3, "atexit ran\n", ""),
        ("raise", 1, "atexit ran\n", "ValueError: boom"),
        ("signal", -15, "", ""),
    ]:
        done = warm_python.run([str(script), how], timeout=60)
        assert (done.returncode, done.stdout) == (code, out), (how, done)
        assert err in done.stderr and ("Traceback" in done.stderr) == (how == "raise"), (how, done.stderr)


def test_a_warm_child_past_its_timeout_is_killed(tmp_path):
    script = tmp_path / "sleeps.py"
    script.write_text("import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(60)\n")
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as caught:
        warm_python.run([str(script)], timeout=2)
    assert time.monotonic() - start < 30
    pid = int(caught.value.output.split()[0])
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert warm_python.run(["-c", "print('next')"], timeout=60).stdout == "next\n"  # the helper serves on


def test_what_a_fork_cannot_give_runs_cold(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    base = dict(os.environ)
    why = warm_python.cold_start_reason
    assert why(dict(base, ALPYKA_BACKENDS="cpu_serial", PYTHONPATH="/x", TORCHINDUCTOR_CACHE_DIR="/y"), base) is None
    assert why(dict(base, OMP_NUM_THREADS="7"), base) == "OMP_NUM_THREADS differ from the warm interpreter's"
    assert "PYTHONHASHSEED" in why(dict(base, PYTHONHASHSEED="1"), base)
    (tmp_path / "sitecustomize.py").write_text("")
    assert why(dict(base, PYTHONPATH=str(tmp_path)), base) == f"{tmp_path} has a sitecustomize.py"
    probe = ["-c", "import sys; print('torch' in sys.modules)"]
    before = warm_python.starts.copy()
    assert warm_python.run(probe, env=dict(os.environ, OMP_NUM_THREADS="7"), timeout=60).stdout == "False\n"
    monkeypatch.setenv("ALPYKA_TEST_WARM", "0")
    assert warm_python.run(probe, timeout=60).stdout == "False\n"
    monkeypatch.delenv("ALPYKA_TEST_WARM")
    assert warm_python.run(probe, timeout=60).stdout == "True\n", why(dict(os.environ), warm_python._base_env())
    counted = warm_python.starts - before  # each request counted as warm, or under why it was not
    assert counted == {"OMP_NUM_THREADS differ from the warm interpreter's": 1, "ALPYKA_TEST_WARM=0": 1, "warm": 1}


def test_an_interrupted_run_leaves_no_child_and_the_next_run_works(tmp_path, monkeypatch):
    """Ctrl-C while a warm child runs: the child is killed, the helper replaced, nothing mixed up."""
    script = tmp_path / "sleeps.py"
    script.write_text("import os, time\nopen(os.environ['PID_FILE'], 'w').write(str(os.getpid()))\ntime.sleep(60)\n")
    pid_file = tmp_path / "pid"
    real_reply, calls = warm_python._reply, []

    def interrupted(helper, timeout):
        calls.append(timeout)
        if len(calls) == 2:  # waiting for the child's end: the user presses Ctrl-C
            deadline = time.monotonic() + 30
            while not pid_file.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            raise KeyboardInterrupt
        return real_reply(helper, timeout)

    env = dict(os.environ, PID_FILE=str(pid_file))
    warm_python.run(["-c", "pass"], timeout=60)  # the helper started: its environment is the base
    assert warm_python.cold_start_reason(env, warm_python._base_env()) is None
    monkeypatch.setattr(warm_python, "_reply", interrupted)
    with pytest.raises(KeyboardInterrupt):
        warm_python.run([str(script)], env=env, timeout=120)
    monkeypatch.setattr(warm_python, "_reply", real_reply)
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # killed: gone once its parent, the old helper, reaped it
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the interrupted child {pid} still runs")
    assert warm_python.run(["-c", "print('after')"], timeout=60).stdout == "after\n"


def test_a_helper_that_dies_before_forking_leaves_the_runs_cold(monkeypatch):
    """A preload that crashes the helper (a broken torch build, say) costs the speed, not the run."""
    warm_python.stop()
    monkeypatch.setattr(warm_python, "_broken", None)
    monkeypatch.setattr(
        warm_python,
        "_started_helper",
        lambda: subprocess.Popen(
            [sys.executable, "-c", "import sys; sys.exit(3)"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
        ),
    )
    before = warm_python.starts.copy()
    probe = ["-c", "import sys; print('torch' in sys.modules)"]
    assert warm_python.run(probe, timeout=60).stdout == "False\n"
    assert warm_python.run(probe, timeout=60).stdout == "False\n"  # no second try at a helper
    counted = warm_python.starts - before
    assert list(counted.values()) == [2] and "ended: 3" in next(iter(counted)), counted


def test_a_killed_test_process_leaves_no_output_folder_after_the_next_start(tmp_path):
    """A test worker killed while its warm child runs leaves ``<tmp>/alpyka-warm-*``; the next
    helper start (here: another process's) removes it, its owner being dead."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "ALPYKA_TEST_WARM": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (warm_python._REPO, os.environ.get("PYTHONPATH")) if p)
    pid_file = tmp_path / "child.pid"
    child = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    runner = "import sys; from alpyka_testing import warm_python; print(warm_python.run(sys.argv[1:], timeout=150))"
    worker = subprocess.Popen([sys.executable, "-c", runner, "-c", child], env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (pid_file.exists() and pid_file.read_text()):
            time.sleep(0.1)
        left = [p.name for p in tmp.iterdir() if p.name.startswith("alpyka-warm-")]
        assert len(left) == 1, left
    finally:
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
        if pid_file.exists() and pid_file.read_text():
            os.kill(int(pid_file.read_text()), signal.SIGKILL)  # its helper then ends (stdin closed)
    assert (tmp / left[0]).exists()
    nxt = subprocess.run(
        [sys.executable, "-c", runner, "-c", "print('next')"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert nxt.returncode == 0 and "next" in nxt.stdout, nxt.stderr
    assert [p.name for p in tmp.iterdir() if p.name.startswith("alpyka-warm-")] == []


def test_a_script_in_a_symlinked_folder_has_its_real_folder_first_on_sys_path(tmp_path):
    """CPython puts the script's folder, its symlinks resolved, first on ``sys.path``: a script
    reached through a linked folder imports what lies next to its real file; so does a warm one."""
    (tmp_path / "extra").mkdir()
    real = tmp_path / "real"
    real.mkdir()
    (real / "report.py").write_text(_REPORT)
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    before = warm_python.starts.copy()
    warm, cold = _both([str(link / "report.py")], tmp_path)
    assert warm.returncode == cold.returncode == 0, (warm.stderr, cold.stderr)
    assert dict(warm_python.starts - before) == {"warm": 1}, warm_python.starts - before
    w, c = json.loads(warm.stdout), json.loads(cold.stdout)
    w.pop("warm"), c.pop("warm")
    assert c["path0"] == os.path.realpath(real) != str(link)
    assert w == c
