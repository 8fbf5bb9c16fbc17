"""The ``alpyka`` command: subcommands found through entry points, one error printer for all."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from portable.cli import CliError, run
from portable.cli import _main as _cli

ROOT = Path(__file__).resolve().parents[2]


def test_source_commands_match_pyproject():
    """The fallback list of a source checkout is the entry-point table of pyproject.toml."""
    tomllib = pytest.importorskip("tomllib")
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][_cli.GROUP]
    assert table == _cli.SOURCE_COMMANDS
    for target in table.values():  # each names a module file and a function in it
        module, _, attr = target.partition(":")
        src = (ROOT / Path(*module.split("."))).with_suffix(".py").read_text()
        assert f"def {attr}(" in src, target


def test_finding_the_commands_imports_no_subcommand():
    code = (
        "import sys; from portable.cli import _main as _cli; names = _cli.commands(); "
        "assert {'info', 'bench', 'demo', 'aot', 'export', 'serve'} <= set(names), names; "
        "loaded = [m for m in sys.modules if m.split('.')[0] in ('inference', 'torch')]; "
        "assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=120)


def test_info_runs(capsys):
    assert _cli.main(["info"]) == 0
    assert "cpu_serial" in capsys.readouterr().out


def test_info_help_names_the_command_typed(capsys):
    """``alpyka info --help`` said ``usage: python -m portable [-h] [{info}]``."""
    for argv, prog, usage in (
        (["info", "--help"], "alpyka", "usage: alpyka info [-h]\n"),
        (["info", "--help"], "python -m portable", "usage: python -m portable info [-h]\n"),
    ):
        with pytest.raises(SystemExit) as done:
            _cli.main(argv, prog)
        assert done.value.code == 0
        assert capsys.readouterr().out.startswith(usage)


def test_bench_finds_the_checkout_it_runs_from_wherever_it_is_run(monkeypatch, tmp_path):
    """``alpyka bench`` run outside the clone's root (its examples/, or anywhere with the clone on
    PYTHONPATH) said the benchmarks were not part of the installed package: it looked for them
    in portable/ instead of the clone's root, so only a run from the root found them."""
    monkeypatch.chdir(tmp_path)
    assert _cli._benchmarks_runner() == Path(__file__).resolve().parents[2] / "benchmarks" / "run_all.py"


def test_bench_runs_no_other_packages_benchmarks(monkeypatch, tmp_path):
    """A ``benchmarks/run_all.py`` that is not alpyka's (another distribution's, beside an
    installed alpyka in site-packages; a directory that is not a clone) is never run."""
    stranger = tmp_path / "site-packages"
    (stranger / "benchmarks").mkdir(parents=True)
    (stranger / "benchmarks" / "run_all.py").write_text("raise SystemExit('not alpyka')\n")
    (stranger / "pyproject.toml").write_text('[project]\nname = "other"\n')
    assert not _cli._is_alpyka_checkout(stranger)
    assert _cli._is_alpyka_checkout(Path(__file__).resolve().parents[2])
    monkeypatch.chdir(stranger)
    assert _cli._benchmarks_runner() == Path(__file__).resolve().parents[2] / "benchmarks" / "run_all.py"


def test_at_least_is_an_argparse_type_that_names_the_flag(capsys):
    import argparse

    from portable.cli import at_least

    parser = argparse.ArgumentParser(prog="x")
    parser.add_argument("--n", type=at_least(1))
    assert parser.parse_args(["--n", "3"]).n == 3
    for bad, says in (("0", "at least 1, got 0"), ("-2", "at least 1, got -2"), ("2.5", "got '2.5'")):
        with pytest.raises(SystemExit):
            parser.parse_args(["--n", bad])
        assert f"x: error: argument --n: expected a whole number{' of ' if 'least' in says else ', '}{says}" in (
            capsys.readouterr().err
        )


def test_at_least_takes_an_upper_bound(capsys):
    """``at_least(1, most)``: a value past what the work can take (a kernel's shared array, an
    int32 argument) is argparse's one line naming the flag, not a wrong run."""
    import argparse

    from portable.cli import at_least

    parser = argparse.ArgumentParser(prog="x")
    parser.add_argument("--n", type=at_least(1, 4))
    assert parser.parse_args(["--n", "4"]).n == 4
    for bad, says in (("5", "at most 4, got 5"), ("0", "at least 1, got 0")):
        with pytest.raises(SystemExit):
            parser.parse_args(["--n", bad])
        assert f"x: error: argument --n: expected a whole number of {says}" in capsys.readouterr().err


def test_backend_argument_asks_the_device_check_of_the_default_device(capsys):
    """``backend_argument(parser, device_check=f)``: ``f`` gets the backend's default device, and
    its AlpykaError is argparse's one line (exit status 2), as an unknown backend's is."""
    import argparse

    import portable as pk
    from portable.cli import backend_argument

    seen = []

    def check(dev):
        seen.append(dev)
        if dev.backend_name == "cpu_threads":
            raise pk.ArgumentError(f"{dev}: not for this script; use cpu_serial")

    parser = argparse.ArgumentParser(prog="x")
    backend_argument(parser, device_check=check)
    assert parser.parse_args(["cpu_serial"]).backend == "cpu_serial"
    assert seen[-1] == pk.device("cpu_serial")
    with pytest.raises(SystemExit) as ended:
        parser.parse_args(["cpu_threads"])
    assert ended.value.code == 2
    assert "x: error: argument backend: cpu_threads:0" in capsys.readouterr().err


def test_description_is_the_docstrings_first_paragraph_on_one_line():
    from portable.cli import description

    doc = """CMSSW's fit (RecoTracker's ``brokenline`` namespace and
    the kernels) in alpyka's kernel language.

    Run: python x.py
    """
    want = "CMSSW's fit (RecoTracker's `brokenline` namespace and the kernels) in alpyka's kernel language."
    assert description(doc) == want
    assert description(None) == ""


def test_bench_outside_a_checkout_says_why(monkeypatch, capsys):
    monkeypatch.setattr(_cli, "_benchmarks_runner", lambda: None)
    assert _cli.main(["bench", "--quick"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("alpyka bench: error: the benchmarks are not part of the installed")
    assert "clone" in err


def test_one_printer(monkeypatch, capsys):
    monkeypatch.delenv("ALPYKA_TRACEBACK", raising=False)

    def fails(exc):
        def command(argv, prog):
            raise exc

        return command

    assert run(fails(CliError("say --x\nmore detail")), [], "alpyka t") == 2
    assert capsys.readouterr().err == "alpyka t: error: say --x\n"
    missing = ModuleNotFoundError("No module named 'torch'", name="torch")
    assert run(fails(missing), [], "alpyka t") == 2
    assert "pip install -e '.[torch]'" in capsys.readouterr().err
    with pytest.raises(ZeroDivisionError):  # a bug keeps its traceback
        run(fails(ZeroDivisionError("x")), [], "alpyka t")
    monkeypatch.setenv("ALPYKA_TRACEBACK", "1")
    with pytest.raises(CliError):
        run(fails(CliError("x")), [], "alpyka t")


def test_a_registered_command_runs_through_the_printer(monkeypatch, capsys):
    def command(argv, prog):
        raise ValueError(f"{prog} got {argv}")

    monkeypatch.setattr(_cli, "commands", lambda: {"info": lambda: command})
    assert _cli.main(["info", "a"]) == 2
    assert capsys.readouterr().err == "alpyka info: error: alpyka info got ['a']\n"


# ------------------------------------------------------------------ module:attribute references
def _module_file(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(body)
    return path


def test_ctrl_c_while_a_reference_imports_is_not_an_import_error(tmp_path):
    """Ctrl-C (KeyboardInterrupt) and SystemExit raised while the named module imports reach the
    caller as they are: the pipeline server's loader caught BaseException and turned Ctrl-C into
    an import error."""
    from portable.cli import load_reference

    ctrl_c = _module_file(tmp_path, "alpyka_ref_ctrl_c", "raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        load_reference(f"{ctrl_c}:x", "pipeline")
    leaves = _module_file(tmp_path, "alpyka_ref_exits", "import sys\nsys.exit(3)\n")
    with pytest.raises(SystemExit):
        load_reference(f"{leaves}:x")
    assert "alpyka_ref_ctrl_c" not in sys.modules and "alpyka_ref_exits" not in sys.modules


def test_reference_errors_say_which_part_is_wrong(tmp_path, monkeypatch):
    from portable import AlpykaError
    from portable.cli import BadReference, load_reference

    good = _module_file(tmp_path, "alpyka_ref_good", "VALUE = 7\nclass Box:\n    inner = 8\n")
    assert load_reference(f"{good}:VALUE") == 7
    monkeypatch.chdir(tmp_path)  # a module name is looked up from the working directory too
    assert load_reference("alpyka_ref_good:Box.inner") == 8
    broken = _module_file(tmp_path, "alpyka_ref_broken", "1 / 0\n")
    cases = {
        "no_colon_here": "is not a command reference; use package.module:attribute",
        "alpyka_no_such_module_x:main": "the command module 'alpyka_no_such_module_x' does not import: "
        "ModuleNotFoundError",
        f"{broken}:x": "does not import: ZeroDivisionError: division by zero (run the file with python",
        "alpyka_ref_good:missing": "has no attribute 'missing'; name one it defines",
        f"{tmp_path / 'absent.py'}:x": "does not import: FileNotFoundError",
    }
    for ref, message in cases.items():
        with pytest.raises(BadReference, match=re.escape(message)) as info:
            load_reference(ref, "command")
        assert isinstance(info.value, AlpykaError) and isinstance(info.value, ImportError)


def test_a_command_that_does_not_import_prints_one_line(capsys, monkeypatch):
    monkeypatch.setitem(_cli.SOURCE_COMMANDS, "demo", "alpyka_no_such_module_y:command")
    monkeypatch.setattr(_cli.importlib.metadata, "entry_points", lambda group: [])
    assert _cli.main(["demo"]) == 2
    err = capsys.readouterr().err
    assert "alpyka demo: error: the command module 'alpyka_no_such_module_y' does not import" in err


def test_python_m_portable_is_the_alpyka_command():
    """``python -m portable`` offered ``info`` only: no way to the other commands without the script"""
    out = subprocess.run(
        [sys.executable, "-m", "portable", "--help"], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert out.startswith("usage: python -m portable")
    for name in _cli.HELP:
        assert f"{name}:" in out, name
    bad = subprocess.run([sys.executable, "-m", "portable", "nope"], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "invalid choice: 'nope'" in bad.stderr and "'demo'" in bad.stderr
    plain = subprocess.run([sys.executable, "-m", "portable"], capture_output=True, text=True, check=True, cwd=ROOT)
    assert plain.stdout.startswith("alpyka ") and "cpu_serial" in plain.stdout  # no command: info


def test_a_reader_that_leaves_ends_the_command_quietly():
    """``alpyka info | head -1`` printed 'alpyka info: error: [Errno 32] Broken pipe'"""
    code = (
        "import sys\n"
        "from portable.cli import run\n"
        "def command(args, prog):\n"
        "    while True:\n"
        "        print('x' * 1000, flush=True)\n"
        "sys.exit(run(command, [], 'alpyka info'))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert proc.stdout.readline().startswith("x")
        proc.stdout.close()  # the reader leaves (head -1)
        err = proc.stderr.read()
        assert (proc.wait(60), err) == (141, "")
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()


def test_a_broken_pipe_that_is_not_stdout_is_an_error():
    """an EPIPE of a socket or a child's pipe, stdout fine: reported as before (it ended quietly,
    and stdout went to /dev/null for the rest of the process)"""
    code = (
        "import socket, sys\n"
        "from portable.cli import run\n"
        "def command(args, prog):\n"
        "    a, b = socket.socketpair()\n"
        "    b.close()\n"
        "    a.sendall(b'x' * 100000)\n"
        "sys.exit(run(command, [], 'alpyka demo'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == "alpyka demo: error: [Errno 32] Broken pipe", done.stderr


def test_run_script_lets_a_ctrl_c_go_on_quietly_and_leaves_an_interactive_session_as_it_was(monkeypatch, capsys):
    """run_script prints its one line and lets the KeyboardInterrupt go on (Python then ends the
    process by SIGINT) with an excepthook silent for it alone; in an interactive session it
    changes nothing: no hook, no SIGINT handler, no line."""
    import signal
    import sys

    from portable import cli

    def interrupted():
        raise KeyboardInterrupt

    handler = signal.getsignal(signal.SIGINT)
    shown = []
    monkeypatch.setattr(cli, "_interrupt_said", False)  # (the line is printed once per process)
    monkeypatch.setattr(sys, "excepthook", lambda *exc: shown.append(exc[0]))
    monkeypatch.setattr(cli, "_interactive", lambda: True)
    with pytest.raises(KeyboardInterrupt):
        cli.run_script(interrupted, prog="x.py")
    assert signal.getsignal(signal.SIGINT) is handler and capsys.readouterr().err == ""
    sys.excepthook(ValueError, ValueError("shown"), None)
    assert shown == [ValueError]
    monkeypatch.setattr(cli, "_interactive", lambda: False)
    try:
        with pytest.raises(KeyboardInterrupt):
            cli.run_script(interrupted, prog="x.py")
        assert signal.getsignal(signal.SIGINT) is cli._exit_at_once
    finally:
        signal.signal(signal.SIGINT, handler)
    assert capsys.readouterr().err == "x.py: interrupted\n"
    sys.excepthook(KeyboardInterrupt, KeyboardInterrupt(), None)  # silent: its line is printed
    sys.excepthook(ValueError, ValueError("shown"), None)  # any other: the previous hook
    assert shown == [ValueError, ValueError]
    assert cli.run_script(lambda: None) == 0 and cli.run_script(lambda: 3) == 3


def test_bench_help_names_the_command_typed(capfd):
    """``alpyka bench --help`` said ``usage: run_all.py`` (the script it runs)."""
    if _cli._benchmarks_runner() is None:
        pytest.skip("no benchmarks/ beside this package or in the current directory (an installed alpyka)")
    assert _cli.main(["bench", "--help"]) == 0
    out = capfd.readouterr().out
    assert out.startswith("usage: alpyka bench [-h]"), out[:200]
