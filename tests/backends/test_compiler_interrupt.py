"""Ctrl-C while alpyka compiles a library (the GPU emulator's kernels on cuda/rocm, the native
OpenCL launch) stops the compiler and leaves nothing behind. ``subprocess.run`` SIGKILLed the
driver only: ``cc1plus`` ran on for seconds after the program had ended, and the driver's
temporary ``cc*.s`` stayed in ``$TMPDIR`` after every interrupted build (backends/_compiler_run.py).
The Ctrl-C is sent to the program alone (a terminal's reaches the compiler itself: it runs in the
program's process group)."""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
import time
from pathlib import Path

import pytest

from alpyka_testing.interrupt import interrupt_child

ROOT = Path(__file__).resolve().parents[2]
CXX = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")

CHILD = textwrap.dedent("""
    import ctypes, sys
    from backends._shared_libraries import Library, build_once, library_cache

    # ~10 s of -O2 work on a free core: still compiling when the Ctrl-C comes
    unit = "\\n".join(
        f"extern \\"C\\" double f{i}(double x) {{ double s = 0; for (int k = 0; k < {i % 7 + 3}; ++k) "
        f"s += __builtin_sin(x * k + {i}) / (k + 1.0); return s; }}"
        for i in range(3000)
    )
    lib = Library([sys.argv[1], "-O2", "-shared", "-fPIC", "-x", "c++"], unit, "heavy_unit.cpp",
                  "alpyka_heavy_unit.so", "a test library", ctypes.CDLL)
    print("compiling", flush=True)
    build_once(lib, library_cache("interrupt_test"))
    print("the compile ended before the Ctrl-C", flush=True)
""")


def _compilers_of(marker: str) -> list[int]:
    """Pids of live processes whose command line names ``marker`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


@pytest.mark.skipif(CXX is None, reason="no C++ compiler (c++, g++, clang++)")
@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc to find the compiler")
def test_ctrl_c_during_a_build_stops_the_compiler_and_leaves_no_files(tmp_path):
    tmpdir, cache = tmp_path / "tmp", tmp_path / "cache"
    tmpdir.mkdir()
    cache.mkdir(mode=0o700)
    script = tmp_path / "build_heavy.py"
    script.write_text(CHILD)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "TMPDIR": str(tmpdir),
        "ALPYKA_CACHE_DIR": str(cache),
    }
    # 1.5 s after "compiling": the driver has started cc1plus, which writes the driver's cc*.s
    run = interrupt_child([sys.executable, str(script), CXX], env, ready="compiling", exit_wait_s=30)
    assert run.rc is not None, f"still running 30 s after Ctrl-C: {run.err[-3000:]}"
    assert run.said("the compile ended before the Ctrl-C") is None, "the compile was too quick to interrupt"
    assert "KeyboardInterrupt" in run.err, run.err[-3000:]
    deadline = time.monotonic() + 5  # SIGTERM, then SIGKILL after 2 s: gone by now
    mine = str(tmp_path)  # (this run's: its files, $TMPDIR and cache, are on the compilers' command lines)
    while _compilers_of(mine) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _compilers_of(mine), "the compiler runs on after the program ended"
    left = sorted(str(p.relative_to(tmp_path)) for p in tmpdir.rglob("*"))
    assert not left, f"the interrupted compile left {left} in $TMPDIR"
    built = cache / "interrupt_test"
    assert not [p for p in built.iterdir() if p.is_dir()], "a build directory was left in the cache"


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc to find the compiler")
@pytest.mark.parametrize("how", ["group", "program"])
def test_a_compiler_ends_with_its_program_s_group_and_with_its_program(tmp_path, how):
    """The compiler runs in its program's process group: a signal to the group (a terminal's
    Ctrl-C, a server's group stopped with killpg) reaches it; a Ctrl-C to the program alone
    stops it through run_compiler. Neither leaves it running."""
    import signal
    import subprocess

    marker = tmp_path / "compiler-ran-to-its-end"
    child = textwrap.dedent("""
        import os
        from backends._compiler_run import run_compiler
        print("compiling", flush=True)
        run_compiler(["sh", "-c", "sleep 20; touch " + os.environ["MARKER"]], timeout=60)
    """)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "MARKER": str(marker),  # (on the compiler's command line, not on its program's)
    }
    p = subprocess.Popen(
        [sys.executable, "-c", child],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # (a group of its own, as a terminal's job: the signal reaches only it)
    )
    try:
        assert p.stdout.readline().strip() == "compiling"
        deadline = time.monotonic() + 10
        while not _compilers_of(str(marker)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _compilers_of(str(marker)), "the compiler did not start"
        if how == "group":
            os.killpg(p.pid, signal.SIGTERM)
        else:
            p.send_signal(signal.SIGINT)
        p.wait(timeout=30)
        deadline = time.monotonic() + 5
        while _compilers_of(str(marker)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _compilers_of(str(marker)), f"the compiler runs on after its program ({how})"
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        for pid in _compilers_of(str(marker)):
            os.kill(pid, signal.SIGKILL)
        p.stdout.close()
        p.stderr.close()
    assert not marker.exists()
