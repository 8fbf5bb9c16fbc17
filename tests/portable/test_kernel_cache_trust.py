"""The kernel cache (portable/compiler/_cache.py) trusts nothing on disk: a cached module that is not
the source it is named after is rewritten (one warning), a numba index or data file numba cannot
load is dropped and the kernel compiled again, files follow the umask, a failed write leaves no
partial file, and a cache that cannot be written compiles kernels in memory with one warning
naming ALPYKA_CACHE_DIR (the opencl backend included: pyopencl's caches too)."""

from __future__ import annotations

import errno
import importlib.util
import marshal
import os
import pickle
import py_compile
import stat
import subprocess
import sys
import textwrap
import uuid
import warnings
from pathlib import Path

import pytest

from portable._errors import AlpykaWarning
from portable.compiler import _cache, _trust

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh ALPYKA_CACHE_DIR, no cache warning given yet, and the test's modules unloaded after."""
    d = tmp_path / "cache"
    monkeypatch.setenv("ALPYKA_CACHE_DIR", str(d))
    monkeypatch.setattr(_cache, "_warned", set(), raising=False)
    before = set(sys.modules)
    yield d
    for name in set(sys.modules) - before:
        if name.startswith("alpyka_test_"):
            del sys.modules[name]


def _source(body: str) -> str:
    return f"# {uuid.uuid4().hex}\n" + textwrap.dedent(body)


#: a numba function cached as the generated modules do (backends/_numba_emit.py's header): on disk
#: beside the module's file, not at all for a module kept in memory
_NUMBA = 'from numba import njit\n@njit(cache="__file__" in globals())\ndef f(x):\n    return {}\n'


def _cache_warnings(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, AlpykaWarning)]


def _load(source: str):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        mod = _cache.load_generated_module(source, "test")
    return mod, _cache_warnings(record)


# ---------------------------------------------------------------------- the module file
@pytest.mark.parametrize("damage", ["one byte changed", "truncated", "empty", "bytes appended"])
def test_a_damaged_cached_module_is_rewritten_with_one_warning(cache, damage):
    sources = [_source("def answer():\n    return (41 +\n            1)\n") for _ in range(2)]
    paths = []
    for src in sources:
        path = cache / f"{_cache.module_name(src, 'test')}.py"
        cache.mkdir(exist_ok=True)
        bad = {
            "one byte changed": src.replace("41", "40"),
            "truncated": src[: len(src) // 2 + 10],
            "empty": "",
            "bytes appended": src + "def answer():\n    return 40\n",
        }[damage]
        path.write_text(bad)
        paths.append(path)
    mod, said = _load(sources[0])
    assert mod.answer() == 42
    assert paths[0].read_text() == sources[0]
    assert len(said) == 1 and str(paths[0]) in said[0] and "rewritten" in said[0]
    mod, said = _load(sources[1])  # once per process
    assert mod.answer() == 42 and paths[1].read_text() == sources[1] and said == []


@pytest.mark.parametrize("umask", [0o002, 0o022, 0o000])
def test_the_cache_is_private_whatever_the_umask(tmp_path, cache, monkeypatch, umask):
    """Directories alpyka makes are 0700 (the missing ones above the cache too), files 0600: a
    group umask (002) would otherwise leave the cache writable by the group, then not private."""
    monkeypatch.setenv("ALPYKA_CACHE_DIR", str(tmp_path / "made" / "cache"))
    old = os.umask(umask)
    try:
        mod, said = _load(_source(_NUMBA.format("x + 7")))
        assert mod.f(1) == 8
    finally:
        os.umask(old)
    assert said == []
    made = tmp_path / "made"
    for p in [made, *made.rglob("*")]:
        assert stat.S_IMODE(p.lstat().st_mode) == (0o700 if p.is_dir() else 0o600), p
    assert sum(1 for p in made.rglob("*.nbi")) == 1


def test_a_failed_write_leaves_no_partial_file_and_compiles_in_memory(cache, monkeypatch):
    def full(fd, data):
        os.write(fd, data[:10])  # half a file, then the disk is full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(_cache, "_write_all", full, raising=False)
    first, said = _load(_source("VALUE = 1\n"))
    second, said2 = _load(_source("VALUE = 2\n"))
    assert (first.VALUE, second.VALUE) == (1, 2)
    assert [p.name for p in cache.rglob("*") if not p.is_dir() and p.name != "secret.key"] == []
    assert len(said) == 1 and "ALPYKA_CACHE_DIR" in said[0] and str(cache) in said[0] and said2 == []


@pytest.mark.parametrize("how", ["read-only", "not a directory"])
def test_an_unwritable_cache_compiles_in_memory_with_one_warning(tmp_path, cache, monkeypatch, how):
    if how == "not a directory":
        (tmp_path / "file").write_text("")
        monkeypatch.setenv("ALPYKA_CACHE_DIR", str(tmp_path / "file" / "cache"))
    else:  # as root chmod does not stop a write: the file system says so instead
        real_mkdir = os.mkdir

        def read_only(path, *a, **k):
            if str(path).startswith(str(cache)):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
            return real_mkdir(path, *a, **k)

        monkeypatch.setattr(os, "mkdir", read_only)
    srcs = [_source(_NUMBA.format(f"x + {k}")) for k in (1, 2)]
    (a, said), (b, said2) = _load(srcs[0]), _load(srcs[1])
    assert (a.f(1), b.f(1)) == (2, 3)
    assert not hasattr(a, "__file__") and not cache.exists()
    assert len(said) == 1 and "ALPYKA_CACHE_DIR" in said[0] and said2 == []


# ---------------------------------------------------------------------- numba's index and data
@pytest.mark.parametrize(
    "damage",
    ["garbage index", "truncated index", "garbage data", "bytes appended to the index", "bytes appended to data"],
)
def test_a_damaged_numba_cache_is_dropped_and_the_kernel_compiled_again(cache, damage):
    src = _source(_NUMBA.format("x * 3"))
    name = _cache.module_name(src, "test")
    mod, _ = _load(src)
    assert mod.f(2) == 6
    index = next((cache / "__pycache__").glob(f"{name}.*.nbi"))
    data = next((cache / "__pycache__").glob(f"{name}.*.nbc"))
    if damage == "garbage index":
        index.write_bytes(b"\x00garbage" * 8)
    elif damage == "truncated index":
        index.write_bytes(index.read_bytes()[:12])
    elif damage == "garbage data":
        data.write_bytes(b"\x80\x05garbage")
    else:  # pickle stops at its STOP opcode: numba reads such a file as it was
        (index if "index" in damage else data).write_bytes((index if "index" in damage else data).read_bytes() + b"x")
    del sys.modules[name]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        mod = _cache.load_generated_module(src, "test")
        assert mod.f(2) == 6  # numba raised here, at every later run, before
    said = _cache_warnings(record)
    assert len(said) == 1 and str(index) in said[0], said
    del sys.modules[name]
    mod, said = _load(src)  # the rewritten index is good: loaded from disk, no warning
    assert mod.f(2) == 6 and said == []
    assert sum(mod.f.stats.cache_hits.values()) == 1


# ---------------------------------------------------------------------- planted files
def test_a_planted_pyc_is_never_imported(cache):
    """A ``__pycache__`` pyc whose header matches the cached module (its mtime and size) was
    imported instead of the verified source: the module is compiled from its source in memory."""
    src = _source("VALUE = 'alpyka made this'\n")
    evil = src.replace("alpyka made this", "planted by other")
    assert len(evil) == len(src)
    name = _cache.module_name(src, "test")
    path = cache / f"{name}.py"
    cache.mkdir(mode=0o700)
    path.write_text(evil)
    py_compile.compile(str(path), cfile=importlib.util.cache_from_source(str(path)), doraise=True)
    st = path.stat()
    path.write_text(src)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # the pyc's header matches the good file
    mod, said = _load(src)
    assert mod.VALUE == "alpyka made this" and said == []


@pytest.mark.parametrize("damage", ["planted code", "bytes appended", "tag of another file"])
def test_compiled_code_whose_tag_does_not_match_is_not_run(cache, damage):
    """alpyka keeps each module's compiled code (``<module>.code``, marshalled, tagged): the code
    run is that file's only with its own tag, else the source is compiled again and the file
    rewritten."""
    src = _source("VALUE = 'alpyka made this'\n")
    name = _cache.module_name(src, "test")
    mod, _ = _load(src)
    code = cache / f"{name}.code"
    good = code.read_bytes()
    assert mod.VALUE == "alpyka made this" and good[32:] == marshal.dumps(compile(src, mod.__file__, "exec"))
    evil = marshal.dumps(compile(src.replace("alpyka made this", "planted by other"), mod.__file__, "exec"))
    other, _ = _load(_source("VALUE = 1\n"))
    code.write_bytes(
        {
            "planted code": good[:32] + evil,
            "bytes appended": good + b"\0" * 8,
            "tag of another file": Path(other.__file__).with_suffix(".code").read_bytes(),
        }[damage]
    )
    del sys.modules[name]
    mod, said = _load(src)
    assert mod.VALUE == "alpyka made this" and said == []
    assert code.read_bytes() == good, "the code file was not rewritten"
    del sys.modules[name]
    assert _load(src)[0].VALUE == "alpyka made this"


class _Planted:
    """Unpickling this writes a marker file: what a planted pickle could run."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (Path(self.marker), "ran"))


def test_a_planted_numba_index_is_never_unpickled(cache, tmp_path):
    src = _source(_NUMBA.format("x * 5"))
    name = _cache.module_name(src, "test")
    mod, _ = _load(src)
    assert mod.f(2) == 10
    index = next((cache / "__pycache__").glob(f"{name}.*.nbi"))
    marker = tmp_path / "ran"
    index.write_bytes(pickle.dumps(_Planted(str(marker))))
    del sys.modules[name]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        mod = _cache.load_generated_module(src, "test")
        assert mod.f(2) == 10  # numba reads its index at the first call
    said = _cache_warnings(record)
    assert not marker.exists(), "numba unpickled a planted index"
    assert len(said) == 1 and "not the bytes alpyka wrote" in said[0] and str(index) in said[0], said


def _another_group() -> int:
    """A group this process may give a directory to that is not the user's private group."""
    if os.geteuid() == 0:
        return 65534  # nogroup
    mine = [g for g in os.getgroups() if not _trust._group_of_me_alone(g)]
    if not mine:
        pytest.skip("this user belongs to no group but their private one: no group to share the cache with")
    return mine[0]


def _not_private(tmp_path: Path, cache: Path, how: str) -> None:
    if how == "writable by others":
        cache.chmod(0o777)
    elif how == "writable by the group":
        cache.chmod(0o770)
        os.chown(cache, -1, _another_group())
    elif how == "another user's":
        os.chown(cache, 65534, 65534)
    else:  # a directory above it: anyone may rename the cache and put theirs in its place
        tmp_path.chmod(0o777)


@pytest.mark.parametrize(
    "how", ["writable by others", "writable by the group", "another user's", "a directory above writable by others"]
)
def test_a_cache_that_is_not_private_is_not_used(tmp_path, cache, how):
    if how == "another user's" and os.geteuid() != 0:
        pytest.skip("giving a directory to another user needs root")
    src = _source(_NUMBA.format("x + 100") + "VALUE = 'alpyka made this'\n")
    name = _cache.module_name(src, "test")
    cache.mkdir(mode=0o700)
    (cache / f"{name}.py").write_text(src)  # the right bytes: still not read from there
    os.chmod(cache / f"{name}.py", 0o600)
    _not_private(tmp_path, cache, how)
    try:
        mod, said = _load(src)
        assert mod.VALUE == "alpyka made this" and mod.f(1) == 101
        assert not hasattr(mod, "__file__"), "a module was run from a directory others can write"
        assert len(said) == 1 and "not private to this user" in said[0] and "ALPYKA_CACHE_DIR" in said[0], said
        assert not (cache / "__pycache__").exists() and not (cache / "secret.key").exists()
        del sys.modules[name]
        _, said = _load(_source("VALUE = 2\n"))  # once per process
        assert said == []
    finally:
        tmp_path.chmod(0o700)


def test_a_numba_cache_dir_that_is_not_private_is_not_used(tmp_path, cache, monkeypatch):
    """NUMBA_CACHE_DIR puts numba's index and data files (pickles) elsewhere: there too only in a
    private directory; else numba's disk cache is off for the kernel (one warning)."""
    from numba.core import config

    shared = tmp_path / "numba-shared"
    shared.mkdir(mode=0o700)
    shared.chmod(0o777)
    monkeypatch.setattr(config, "CACHE_DIR", str(shared))
    src = _source(_NUMBA.format("x + 9"))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        mod = _cache.load_generated_module(src, "test")
        assert mod.f(1) == 10
    said = _cache_warnings(record)
    assert len(said) == 1 and "NUMBA_CACHE_DIR" in said[0] and "not private" in said[0], said
    assert [p for p in shared.rglob("*") if not p.is_dir()] == []


def test_a_cache_writable_by_the_users_private_group_is_private(cache):
    """A umask of 002 makes directories group-writable for a group that holds this user alone
    (the user's private group): that lets no one else in, so the cache is used."""
    gid = os.getegid()
    if not _trust._group_of_me_alone(gid):
        pytest.skip(f"group {gid} is not this user's private group (named as the user, no other member)")
    cache.mkdir(mode=0o700)
    os.chown(cache, -1, gid)
    cache.chmod(0o770)
    mod, said = _load(_source("VALUE = 3\n"))
    assert mod.VALUE == 3 and said == [] and Path(mod.__file__).parent == cache


# ---------------------------------------------------------------------- a kernel, end to end
_KERNEL = """\
import sys, warnings
warnings.simplefilter("always")
import numpy as np
import portable as pk
from alpyka_testing.kernels import download, upload

@pk.kernel
def scale(acc, out, inp, k, n):
    for i in acc.uniform_elements(n):
        out[i] = k * inp[i]

@pk.kernel
def shift(acc, out, inp, k, n):
    for i in acc.uniform_elements(n):
        out[i] = inp[i] + k

dev = pk.device(sys.argv[1])
q = pk.Queue(dev)
inp = upload(q, np.arange(10, dtype=np.float32))
out = upload(q, np.zeros(10, np.float32))
for kern in (scale, shift):
    pk.exec(q, pk.make_workdiv(dev, 2, 8), kern, out, inp, np.float32(3), 10)
    print(kern.__name__, download(q, out).tolist())
"""


def _run_kernels(tmp_path: Path, backend: str, env: dict, prefix: list[str] | None = None):
    script = tmp_path / "kernels.py"
    script.write_text(_KERNEL)
    # the suite's HIP check (ALPYKA_CHECK_HIP, tests/conftest.py) keeps its toolchain in the cache
    # too and would add a warning of its own: these children test the kernel cache alone
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ALPYKA_CHECK_HIP": "0", **env}
    done = subprocess.run(
        [sys.executable, *(prefix or []), str(script), backend],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    want = [f"scale {[3.0 * i for i in range(10)]}", f"shift {[i + 3.0 for i in range(10)]}"]
    assert done.stdout.splitlines() == want
    return [ln for ln in done.stderr.splitlines() if "AlpykaWarning" in ln]


@pytest.mark.alpyka_backends("cpu_serial", "cpu_threads", "opencl")
def test_a_kernel_runs_where_no_cache_can_be_written(device, tmp_path):
    """ALPYKA_CACHE_DIR and the user's cache directory unwritable: both kernels run, with one
    warning naming the variable to set (on opencl XDG_CACHE_HOME too, where pyopencl keeps the
    argument setters of kernels: its caches are turned off; ALPYKA_CACHE_DIR there for the native
    launch library, which an OpenCL queue looks for in the cache when it is made)."""
    (tmp_path / "file").write_text("")
    said = _run_kernels(
        tmp_path,
        device.backend_name,
        {
            "ALPYKA_CACHE_DIR": str(tmp_path / "file" / "alpyka"),
            "XDG_CACHE_HOME": str(tmp_path / "file" / "xdg"),
            "OCL_ICD_VENDORS": "",
        },
    )
    variables = ["ALPYKA_CACHE_DIR"]
    if device.backend_name == "opencl":
        from backends._opencl_native import native_problem

        variables = ["XDG_CACHE_HOME"] + (variables if native_problem() is None else [])
    named = [v for v in ("ALPYKA_CACHE_DIR", "XDG_CACHE_HOME") for line in said if f"set {v} to a writable" in line]
    assert len(said) == len(variables) and sorted(named) == sorted(variables), said


@pytest.mark.alpyka_backends(kind="cpu")
def test_a_kernel_runs_where_the_cache_disk_is_full(device, tmp_path):
    """Every file write fails (RLIMIT_FSIZE 0: the writes of a full disk): both kernels run, one
    warning, and no partial file is left in the cache."""
    wrapper = tmp_path / "full_disk.py"
    wrapper.write_text(
        "import resource, runpy, signal, sys\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))\n"
        "sys.argv = sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    d = tmp_path / "alpyka"
    said = _run_kernels(tmp_path, device.backend_name, {"ALPYKA_CACHE_DIR": str(d)}, [str(wrapper)])
    assert len(said) == 1 and "ALPYKA_CACHE_DIR" in said[0], said
    assert [p for p in d.rglob("*") if not p.is_dir()] == []


def test_test_artifacts_are_not_taken_from_a_cache_that_is_not_private(cache, monkeypatch):
    """The suite's artifacts (alpyka_testing/artifact_cache.py: AOTInductor libraries, torch
    files) are loaded as code: from a cache others can write, never; built privately instead."""
    from alpyka_testing import artifact_cache

    monkeypatch.setattr(artifact_cache, "_private_builds", {}, raising=False)
    planted = cache / "test-artifacts" / "model-k"
    planted.mkdir(parents=True)
    (planted / "f").write_text("planted")
    cache.chmod(0o777)
    built = []

    def build(d):
        built.append(d)
        (d / "f").write_text("built")

    got = artifact_cache.cached_dir("model", "k", build)
    assert (got / "f").read_text() == "built" and cache not in got.parents
    assert artifact_cache.cached_dir("model", "k", build) == got and len(built) == 1  # once per process
    assert (planted / "f").read_text() == "planted"
