"""Ctrl-C ends an ``alpyka`` subcommand as it ends an example (``portable.cli.run_script``): one
line on stderr, then the process dies by SIGINT, so that a shell loop running the command
(``while alpyka demo; do :; done``) stops too; exit status 130 let the loop go on. Real child
processes get a real SIGINT; the demo's and ``alpyka serve``'s own runs are in tests/demo and
tests/remote."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from alpyka_testing.interrupt import interrupt_child

ROOT = Path(__file__).resolve().parents[2]
#: from SIGINT to the end of a child that only sleeps (about 0.1 s idle; a loaded 2-core machine is slower)
EXIT_LIMIT_S = 20.0

#: ``alpyka nap``: a subcommand that says it started and sleeps, run through the command's own main
CHILD = textwrap.dedent("""
    import sys
    import time

    from portable.cli import _main

    def nap(argv, prog):
        print("launching", flush=True)
        time.sleep(120)
        return 0

    _main._BUILTIN["nap"] = nap
    sys.exit(_main.main(["nap"]))
""")


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("ALPYKA_TRACEBACK", None)
    return env


def test_ctrl_c_ends_a_subcommand_with_one_line_killed_by_sigint():
    run = interrupt_child([sys.executable, "-c", CHILD], _env(), running_s=0.3, exit_wait_s=EXIT_LIMIT_S)
    assert run.rc == -signal.SIGINT, (run.rc, run.err[-3000:])
    assert run.err == "alpyka nap: interrupted\n", run.err[-3000:]


def test_a_shell_loop_over_the_command_stops_at_ctrl_c(tmp_path):
    """The terminal's Ctrl-C reaches bash and the command (one process group); bash waits for the
    command and stops its loop only when the command died by SIGINT."""
    child = tmp_path / "nap.py"
    child.write_text(CHILD)
    started = tmp_path / "started"
    loop = f"while {sys.executable} {child} > {started}; do :; done; echo loop-went-on"
    shell = subprocess.Popen(
        ["bash", "-c", loop], env=_env(), stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while "launching" not in (started.read_text() if started.exists() else ""):
            assert shell.poll() is None and time.monotonic() < deadline, shell.stderr.read()
            time.sleep(0.05)
        os.killpg(shell.pid, signal.SIGINT)  # as a terminal does: the whole foreground group
        _, err = shell.communicate(timeout=EXIT_LIMIT_S)
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()
    assert shell.returncode == -signal.SIGINT, (shell.returncode, err)
    assert err == "alpyka nap: interrupted\n", err


def test_end_by_interrupt_changes_nothing_off_the_main_thread_or_in_a_session(monkeypatch, capsys):
    """Off the main thread or in an interactive session the KeyboardInterrupt goes on as it is:
    no line, no hook, no SIGINT handler; on the main thread of a program, one line per process."""
    import threading

    from portable import cli

    monkeypatch.setattr(cli, "_interrupt_said", False)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    handler = signal.getsignal(signal.SIGINT)
    monkeypatch.setattr(cli, "_interactive", lambda: True)
    assert cli.end_by_interrupt("x: interrupted") is False
    got = []
    monkeypatch.setattr(cli, "_interactive", lambda: False)
    t = threading.Thread(target=lambda: got.append(cli.end_by_interrupt("x: interrupted")))
    t.start()
    t.join()
    assert got == [False] and signal.getsignal(signal.SIGINT) is handler
    assert capsys.readouterr().err == ""
    try:
        assert cli.end_by_interrupt("x: interrupted") is True
        assert cli.end_by_interrupt("y: interrupted") is True  # said already: no second line
        assert signal.getsignal(signal.SIGINT) is cli._exit_at_once
    finally:
        signal.signal(signal.SIGINT, handler)
    assert capsys.readouterr().err == "x: interrupted\n"


@pytest.mark.parametrize("second", [False, True], ids=["demo-style", "second-ctrl-c"])
def test_die_by_sigint_ends_the_process_by_sigint(second):
    """The demo's way out where the interpreter must not finalise (a second Ctrl-C, a stream
    stuck inside PyTorch): killed by SIGINT, not ``os._exit(130)``, with its output flushed."""
    code = "from portable.cli import die_by_sigint\nprint('said', end='')\ndie_by_sigint()\nprint('not reached')\n"
    if second:  # from a signal handler, as the demo's second Ctrl-C
        code = (
            "import os, signal, time\nfrom portable.cli import die_by_sigint\n"
            "signal.signal(signal.SIGINT, lambda *a: die_by_sigint())\nprint('said', end='')\n"
            "os.kill(os.getpid(), signal.SIGINT)\ntime.sleep(30)\nprint('not reached')\n"
        )
    done = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGINT and done.stdout == "said", (done.returncode, done.stdout, done.stderr)


#: a program whose import of portable gets a real SIGINT once portable's own imports began (the
#: finder sends it when ``portable.linalg`` is looked for, the package's first heavy import)
STARTING = textwrap.dedent("""
    import os, signal, sys

    class CtrlC:
        def find_spec(self, name, path=None, target=None):
            if name == "portable.linalg":
                os.kill(os.getpid(), signal.SIGINT)
            return None

    if sys.argv[1] == "command":
        sys.argv = ["/usr/local/bin/alpyka", "info"]  # as the console script's process,
        sys.modules["__main__"].__file__ = sys.argv[0]  # whose __main__ is the script
    sys.meta_path.insert(0, CtrlC())
    from portable.cli._main import main
    sys.exit(main())
""")


def test_ctrl_c_while_the_command_imports_portable_is_one_line():
    """The ``alpyka`` command imports portable (numpy, numba, the compiler: 0.3-1 s) before its
    main runs; a Ctrl-C there printed a KeyboardInterrupt traceback of 10-40 lines."""
    done = subprocess.run(
        [sys.executable, "-c", STARTING, "command"], env=_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == -signal.SIGINT, (done.returncode, done.stderr[-3000:])
    assert done.stderr == "alpyka: interrupted\n", done.stderr[-3000:]


def test_ctrl_c_while_a_program_imports_portable_is_python_s_own():
    """``import portable`` in a user's program (or ``python -c``) leaves Ctrl-C to Python, as
    ``import numba`` or ``import torch`` do: a KeyboardInterrupt with its traceback, the process
    killed by SIGINT; no handler of alpyka's is left behind for the program."""
    done = subprocess.run(
        [sys.executable, "-c", STARTING, "program"], env=_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == -signal.SIGINT, (done.returncode, done.stderr[-3000:])
    assert done.stderr.startswith("Traceback") and done.stderr.endswith("KeyboardInterrupt\n"), done.stderr[-3000:]
    code = "import signal, portable\nassert signal.getsignal(signal.SIGINT) is signal.default_int_handler\n"
    assert subprocess.run([sys.executable, "-c", code], env=_env(), timeout=120).returncode == 0


def test_the_command_s_main_raises_keyboard_interrupt_again_once_it_runs():
    """Past its start the command handles Ctrl-C itself (its streams, its server): ``main`` puts
    Python's handler back, so the start's handler never ends a running command at once."""
    code = textwrap.dedent("""
        import signal, sys
        sys.argv = ["/usr/local/bin/alpyka", "nap"]
        sys.modules["__main__"].__file__ = sys.argv[0]  # as the console script's __main__
        from portable.cli import _main
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler  # the start's
        seen = []
        _main._BUILTIN["nap"] = lambda argv, prog: seen.append(signal.getsignal(signal.SIGINT)) or 0
        assert _main.main(["nap"]) == 0 and seen == [signal.default_int_handler], seen
    """)
    done = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_spawned_child_of_the_command_keeps_pythons_handler(tmp_path):
    """multiprocessing's spawn copies the command's ``sys.argv`` into its children (Dask's workers
    of ``alpyka demo --workers``): a child is not the command and keeps Python's SIGINT handler."""
    code = textwrap.dedent("""
        import multiprocessing as mp, signal, sys

        def handler_name(_):
            import portable  # noqa: F401
            return getattr(signal.getsignal(signal.SIGINT), "__name__", "")

        if __name__ == "__main__":
            sys.argv = ["/usr/local/bin/alpyka", "info"]
            with mp.get_context("spawn").Pool(1) as pool:
                print(pool.map(handler_name, [0])[0])
    """)
    script = tmp_path / "alpyka"  # a script named as the console script
    script.write_text(code)
    done = subprocess.run([sys.executable, str(script)], env=_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "default_int_handler", done.stdout


def test_pytests_own_dash_m_option_is_not_the_command():
    """``-m portable`` among a program's arguments (``python -m pytest -m portable``) is not the
    interpreter's ``-m``: only the interpreter's own option names the command's module."""
    from portable._command_start import _interpreter_module

    assert _interpreter_module(["-m", "pytest", "-m", "portable"]) == "pytest"
    assert _interpreter_module(["-X", "dev", "-m", "portable", "info"]) == "portable"
    assert _interpreter_module(["-c", "pass", "-m", "portable"]) is None
    assert _interpreter_module(["script.py", "-m", "portable"]) is None


def test_a_ctrl_c_while_a_scripts_backend_argument_is_checked_ends_it_with_one_line(monkeypatch):
    """``backend_argument``'s check runs when the arguments are parsed, before ``run_script``: a
    Ctrl-C while the backend loads or probes a device ends the script as ``run_script`` would,
    with one line, not a traceback (the KeyboardInterrupt goes on)."""
    import argparse

    import portable.cli as cli

    said = []

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "default_backend", interrupted)
    monkeypatch.setattr(cli, "end_by_interrupt", lambda line: said.append(line) or True)
    parser = argparse.ArgumentParser(prog="script.py")
    cli.backend_argument(parser)
    with pytest.raises(KeyboardInterrupt):
        parser.parse_args([])
    assert len(said) == 1 and said[0].endswith(": interrupted"), said
