"""What the opencl backend writes and trusts on disk (backends/_opencl_devices.py): the vendors
directory that names the OpenCL libraries to load (a predictable directory in the temporary
directory is used only when it is this user's and no one else can write it; an entry is checked
against the files it must hold), and pyopencl's cache of built programs (in ALPYKA_CACHE_DIR;
one that cannot be written or is not private builds uncached, with one warning)."""

from __future__ import annotations

import errno
import os
import pathlib
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest

from backends import _opencl_devices as od
from portable._errors import AlpykaWarning
from portable.compiler import _cache

EVIL = "/tmp/not-alpyka/libevil.so"


@pytest.fixture
def runtimes(tmp_path, monkeypatch):
    """A pip prefix with one runtime, an empty system vendors directory, a private temporary
    directory and OCL_ICD_VENDORS unset; returns the library's path."""
    prefix = tmp_path / "prefix"
    (prefix / "etc" / "OpenCL" / "vendors").mkdir(parents=True)
    (prefix / "lib").mkdir()
    (prefix / "etc" / "OpenCL" / "vendors" / "vendor-cpu.icd").write_text("/build/libvendorocl.so\n")
    lib = prefix / "lib" / "libvendorocl.so"
    lib.write_bytes(b"")
    (tmp_path / "system").mkdir()
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(od, "_prefixes", lambda: [prefix])
    monkeypatch.setattr(od, "SYSTEM_VENDORS", tmp_path / "system")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setenv("ALPYKA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(od.ENV_VENDORS, "")  # recorded, so that what register_runtimes sets is undone
    monkeypatch.delenv(od.ENV_VENDORS)
    return str(lib)


def _register(monkeypatch) -> Path:
    monkeypatch.delenv(od.ENV_VENDORS, raising=False)
    where = od.register_runtimes()
    assert where is not None
    return Path(where)


def _files(where: Path) -> dict[str, str]:
    return {p.name: p.read_text().strip() for p in where.iterdir()}


def _unwritable_cache(tmp_path, monkeypatch) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("ALPYKA_CACHE_DIR", str(tmp_path / "file" / "cache"))


@pytest.mark.parametrize("planted", ["another user's", "world-writable", "a link to another's", "an entry changed"])
def test_a_vendors_directory_in_tmp_that_someone_else_could_write_is_not_trusted(
    tmp_path, monkeypatch, runtimes, planted
):
    digest = _register(monkeypatch).name  # the entry's name, as this process computes it
    _unwritable_cache(tmp_path, monkeypatch)
    root = tmp_path / "tmp" / f"alpyka-opencl-vendors-{os.geteuid()}"
    planted_root = tmp_path / "elsewhere" if planted == "a link to another's" else root
    (planted_root / digest).mkdir(parents=True)
    (planted_root / digest / "vendor-cpu.icd").write_text(EVIL + "\n")
    if planted == "another user's":
        os.chown(root, 65534, 65534)
        os.chown(root / digest, 65534, 65534)
    elif planted == "world-writable":
        os.chmod(root, 0o777)
        os.chmod(root / digest, 0o777)
    elif planted == "a link to another's":
        os.chown(planted_root, 65534, 65534)
        root.symlink_to(planted_root)
    else:
        os.chmod(root, 0o700)
    where = _register(monkeypatch)
    assert _files(where) == {"vendor-cpu.icd": runtimes}
    assert os.environ[od.ENV_VENDORS] == str(where)
    st = os.lstat(where)
    assert st.st_uid == os.geteuid() and not st.st_mode & 0o022
    if planted == "an entry changed":  # the root is this user's and private: the entry is rewritten
        assert where == root / digest
    else:  # someone else's: nothing in it is used or changed
        assert root not in where.parents and planted_root not in where.parents
        assert (planted_root / digest / "vendor-cpu.icd").read_text() == EVIL + "\n"


def test_the_private_tmp_directory_is_made_once_and_reused(tmp_path, monkeypatch, runtimes):
    _unwritable_cache(tmp_path, monkeypatch)
    first = _register(monkeypatch)
    root = tmp_path / "tmp" / f"alpyka-opencl-vendors-{os.geteuid()}"
    assert first.parent == root and (os.lstat(root).st_mode & 0o777) == 0o700
    assert _register(monkeypatch) == first and _files(first) == {"vendor-cpu.icd": runtimes}


def test_a_changed_entry_in_the_cache_is_rewritten(tmp_path, monkeypatch, runtimes):
    where = _register(monkeypatch)
    (where / "vendor-cpu.icd").write_text(EVIL + "\n")
    (where / "extra.icd").write_text(EVIL + "\n")
    assert _register(monkeypatch) == where and _files(where) == {"vendor-cpu.icd": runtimes}


def test_a_failed_write_leaves_no_partial_vendors_directory(tmp_path, monkeypatch, runtimes):
    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))

    monkeypatch.setattr(pathlib.Path, "write_text", full)
    assert od.register_runtimes() is None and od.ENV_VENDORS not in os.environ
    left = [p for d in (tmp_path / "cache", tmp_path / "tmp") if d.exists() for p in d.rglob("*")]
    assert [p for p in left if p.name not in ("opencl-vendors", f"alpyka-opencl-vendors-{os.geteuid()}")] == []


def test_a_vendors_directory_in_a_cache_that_is_not_private_is_not_used(tmp_path, monkeypatch, runtimes):
    """The ICD loader loads the libraries an entry names: a cache directory others can write is
    not used (the private temporary directory is)."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    cache.chmod(0o777)
    where = _register(monkeypatch)
    assert where.parent == tmp_path / "tmp" / f"alpyka-opencl-vendors-{os.geteuid()}"
    assert list(cache.iterdir()) == [] and _files(where) == {"vendor-cpu.icd": runtimes}


# ---------------------------------------------------------------------- pyopencl's program cache
_SOURCE = "__kernel void twice(__global int* x) {{ int i = get_global_id(0); x[i] = 2 * x[i] + {}; }}\n"


def _run_program(device, program, cl) -> list[int]:
    ctx = device.native.context
    cq = cl.CommandQueue(ctx, device.native.device)
    host = np.arange(8, dtype=np.int32)
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)
    knl = cl.Kernel(program, "twice")
    knl.set_args(buf)
    cl.enqueue_nd_range_kernel(cq, knl, (8,), None)
    cl.enqueue_copy(cq, host, buf, is_blocking=True)
    return host.tolist()


@pytest.fixture
def fresh_program_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ALPYKA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(od, "_program_caches", {}, raising=False)
    monkeypatch.setattr(_cache, "_warned", set(), raising=False)
    return tmp_path / "cache" / "opencl-programs"


def _build(device, source):
    import pyopencl as cl

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        program = od.build(cl, device.native.context, source, [device.native.device])
    return cl, program, [str(w.message) for w in record if issubclass(w.category, AlpykaWarning)]


@pytest.mark.alpyka_backends("opencl")
def test_programs_are_cached_in_alpyka_cache_dir(device, fresh_program_cache):
    import pyopencl as cl
    from pyopencl.characterize import has_src_build_cache

    if cl._PYOPENCL_NO_CACHE or has_src_build_cache(device.native.device):
        pytest.skip(
            f"pyopencl does not cache programs for {device.name} (the runtime does, or PYOPENCL_NO_CACHE is set)"
        )
    source = _SOURCE.format(np.random.randint(1 << 30))
    cl, program, said = _build(device, source)
    assert _run_program(device, program, cl) == [2 * i + int(source.split("+ ")[1].split(";")[0]) for i in range(8)]
    assert said == [] and any(p.is_dir() for p in fresh_program_cache.iterdir())


@pytest.mark.alpyka_backends("opencl")
def test_an_unwritable_program_cache_builds_uncached_with_one_warning(
    device, tmp_path, monkeypatch, fresh_program_cache
):
    _unwritable_cache(tmp_path, monkeypatch)
    for k in (1, 2):
        cl, program, said = _build(device, _SOURCE.format(k))
        assert _run_program(device, program, cl) == [2 * i + k for i in range(8)]
        assert len(said) == (k == 1) and all("ALPYKA_CACHE_DIR" in w for w in said)


@pytest.mark.alpyka_backends("opencl")
def test_a_program_cache_that_fails_while_writing_builds_uncached_with_one_warning(
    device, monkeypatch, fresh_program_cache
):
    """pyopencl raised KeyError('PYOPENCL_CACHE_FAILURE_FATAL') where its cache failed to write."""
    import pyopencl as cl
    import pyopencl.cache
    from pyopencl.characterize import has_src_build_cache

    if cl._PYOPENCL_NO_CACHE or has_src_build_cache(device.native.device):
        pytest.skip(f"pyopencl does not cache programs for {device.name}")

    def full(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pyopencl.cache, "get_dependencies", full)  # called while the entry is written
    monkeypatch.delenv("PYOPENCL_CACHE_FAILURE_FATAL", raising=False)
    for k in (1, 2):
        source = _SOURCE.format(np.random.randint(1 << 30))
        cl, program, said = _build(device, source)
        assert _run_program(device, program, cl)[1] == 2 + int(source.split("+ ")[1].split(";")[0])
        assert len(said) == (k == 1) and all("ALPYKA_CACHE_DIR" in w and "No space" in w for w in said), said
    assert [p for p in fresh_program_cache.iterdir() if p.name != "lock"] == []  # no partial entry


@pytest.mark.alpyka_backends("opencl")
def test_a_program_cache_that_is_not_private_is_not_used(device, tmp_path, monkeypatch, fresh_program_cache):
    """pyopencl unpickles what it finds in its cache: a cache directory others can write is not
    used (one warning naming ALPYKA_CACHE_DIR), and nothing is written there."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    cache.chmod(0o777)
    for k in (1, 2):
        cl, program, said = _build(device, _SOURCE.format(k))
        assert _run_program(device, program, cl) == [2 * i + k for i in range(8)]
        assert len(said) == (k == 1) and all("not private" in w and "ALPYKA_CACHE_DIR" in w for w in said), said
    assert not fresh_program_cache.exists()
