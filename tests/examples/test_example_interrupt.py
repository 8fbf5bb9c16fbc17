"""Ctrl-C in an example ends it with one line (``<script>: interrupted``), no
``KeyboardInterrupt`` traceback, killed by SIGINT as Python ends an uncaught Ctrl-C (a shell's
loop over scripts stops too), within seconds, on every backend. The
examples end with ``sys.exit(run_script(main))`` (``portable.cli.run_script``); before, a Ctrl-C
printed a traceback of 10-80 lines that ended deep in numba's compiler or numpy."""

from __future__ import annotations

import ast
import os
import re
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from alpyka_testing.interrupt import interrupt_child

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
#: from SIGINT to the child's exit (about 0.1-0.7 s idle; a loaded 2-core machine is slower)
EXIT_LIMIT_S = 8.0

CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    name = sys.argv[1]
    if name in ("cuda", "rocm"):
        try:
            import cupy  # noqa: F401
        except ImportError:
            from portable import _registry
            _registry.emulate([name])
    import portable as pk
    from portable.cli import run_script

    from alpyka_testing.spin_kernel import spin


    def main(name, iters):
        dev = pk.device(name)
        q = pk.Queue(dev)
        small = pk.Buffer(dev, (4,), np.float64)
        pk.exec(q, pk.valid_workdiv(dev, 4), spin, small, 1000)  # compiled before the Ctrl-C
        q.wait()
        out = pk.Buffer(dev, (4000,), np.float64)
        print("launching", flush=True)
        pk.exec(q, pk.valid_workdiv(dev, 4000), spin, out, iters)  # 20-40 s on 2 cores
        q.wait()
        print("the kernel ended before the Ctrl-C", flush=True)
        return 0


    if __name__ == "__main__":
        sys.exit(run_script(main, name, int(sys.argv[2])))
""")


def test_ctrl_c_ends_a_script_with_one_line_killed_by_sigint(backend, tmp_path):
    script = tmp_path / "long_example.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    iters = 10_000_000 if backend.startswith("cpu") else 20_000_000
    run = interrupt_child([sys.executable, str(script), backend, str(iters)], env, exit_wait_s=EXIT_LIMIT_S + 30)
    if run.rc is None:
        pytest.fail(f"still running {EXIT_LIMIT_S + 30} s after Ctrl-C: {run.err[-3000:]}")
    assert run.rc == -signal.SIGINT, (run.rc, run.lines, run.err[-3000:])
    assert run.err.endswith("long_example.py: interrupted\n"), run.err[-3000:]
    assert "Traceback" not in run.err and "KeyboardInterrupt" not in run.err, run.err[-3000:]
    assert run.ended - run.sent < EXIT_LIMIT_S, f"the process ended {run.ended - run.sent:.1f} s after the signal"


@pytest.mark.parametrize(
    "name", sorted(p.name for p in EXAMPLES.glob("*.py") if re.search(r"^\s*import torch$", p.read_text(), re.M))
)
def test_ctrl_c_while_torch_imports_ends_an_example_with_one_line(name, tmp_path):
    """``import torch`` takes seconds (1.5 s on 2 free cores) before ``run_script``: a Ctrl-C then
    ends the example with the one line too, not a traceback from inside torch (the examples wrap
    it in ``portable.cli.ctrl_c_as_one_line``). A stand-in torch that waits in its import here."""
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text('import time\n\nprint("launching", flush=True)\ntime.sleep(60)\n')
    path = os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    run = interrupt_child([sys.executable, str(EXAMPLES / name)], env, running_s=0.2, exit_wait_s=EXIT_LIMIT_S + 30)
    if run.rc is None:
        pytest.fail(f"still running {EXIT_LIMIT_S + 30} s after Ctrl-C: {run.err[-3000:]}")
    assert run.rc == -signal.SIGINT, (run.rc, run.lines, run.err[-3000:])
    assert run.err == f"{name}: interrupted\n", run.err[-3000:]


#: ``alpyka ARGS...`` as the console script's process runs it (its argv[0] the script's path)
CONSOLE_SCRIPT = textwrap.dedent("""
    import sys

    sys.argv = ["/usr/local/bin/alpyka", *sys.argv[1:]]
    from portable.cli._main import main
    sys.exit(main())
""")


@pytest.mark.parametrize("typed", ["alpyka serve", "python -m portable serve"])
def test_ctrl_c_while_alpyka_serve_imports_torch_names_the_command_typed(typed, tmp_path):
    """``alpyka serve pipeline_service:calibrate`` imports the example, which imports torch in
    ``ctrl_c_as_one_line``: a Ctrl-C there names the command the user typed, as a Ctrl-C anywhere
    else in the command does (before: ``alpyka: interrupted`` and ``__main__.py: interrupted``,
    the name of the process's script). A stand-in torch that waits in its import here."""
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text('import time\n\nprint("launching", flush=True)\ntime.sleep(60)\n')
    path = os.pathsep.join([str(tmp_path), str(ROOT), str(EXAMPLES), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    env.pop("ALPYKA_TRACEBACK", None)
    start = ["-c", CONSOLE_SCRIPT] if typed == "alpyka serve" else ["-m", "portable"]
    argv = [sys.executable, *start, "serve", "pipeline_service:calibrate"]
    run = interrupt_child(argv, env, running_s=0.2, exit_wait_s=EXIT_LIMIT_S + 30)
    if run.rc is None:
        pytest.fail(f"still running {EXIT_LIMIT_S + 30} s after Ctrl-C: {run.err[-3000:]}")
    assert run.rc == -signal.SIGINT, (run.rc, run.lines, run.err[-3000:])
    assert run.err == f"{typed}: interrupted\n", run.err[-3000:]


def _main_guard(path: Path) -> str:
    """The source of the ``if __name__ == "__main__":`` block of ``path``."""
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            return ast.unparse(node)
    raise AssertionError(f"{path.name} has no __main__ block")


@pytest.mark.parametrize(
    "name",
    sorted(p.name for p in EXAMPLES.glob("*.py") if "import portable" in p.read_text()),
)
def test_every_example_that_uses_alpyka_runs_its_main_through_run_script(name):
    """An example run as a script stops on Ctrl-C with one line: its ``main`` goes through
    ``run_script`` (examples/pipeline.py is ``alpyka demo``'s own main, which does the same)."""
    guard = _main_guard(EXAMPLES / name)
    assert "run_script(main" in guard, guard


@pytest.mark.parametrize(
    "name",
    sorted(p.name for p in EXAMPLES.glob("*.py") if "import portable" in p.read_text()),
)
def test_an_examples_main_block_leaves_alpyka_to_run_script(name):
    """Nothing of alpyka's runs in the ``__main__`` block outside ``run_script``: three examples
    called ``pk.default_backend()`` there, which imports and may probe the backends (an OpenCL
    device's probe builds a kernel), so a Ctrl-C then was a KeyboardInterrupt traceback, not the
    one line; ``main`` now takes the backend None and picks the default itself."""
    guard = ast.parse(_main_guard(EXAMPLES / name))  # (run_script's arguments run before it, outside too)
    alpyka = [
        ast.unparse(n)
        for n in ast.walk(guard)
        if isinstance(n, ast.Call) and ast.unparse(n.func).startswith(("pk.", "soa.", "portable."))
    ]
    assert not alpyka, f"{name} runs {alpyka} outside run_script"
