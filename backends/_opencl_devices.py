"""Which OpenCL devices the opencl backend uses: runtimes installed with pip registered, every
device probed with a small kernel, a documented order, and ``ALPYKA_OPENCL_DEVICE``.

- **Registration.** pyopencl's ICD loader reads ``OCL_ICD_VENDORS`` (a directory of ``.icd``
  files), else ``/etc/OpenCL/vendors``, and always adds the runtimes beside pyopencl (the PoCL of
  its wheel, Oclgrind). Runtimes installed by pip into ``<prefix>/etc/OpenCL/vendors`` (Intel's
  ``intel-opencl-rt``) are never seen there, and their ``.icd`` files hold a build-time path. When
  the user has not set ``OCL_ICD_VENDORS``, :func:`register_runtimes` writes a vendors directory
  holding the system's ``.icd`` files and the pip-installed ones with their library's real path,
  and points ``OCL_ICD_VENDORS`` at it before the first platform query.
- **Probe.** A device is used only once a kernel with local memory and a barrier built and ran
  on it with the right result (a runtime whose compiler does not know the machine's CPU fails
  here, not in the user's first kernel). Failures are kept with their reason for ``alpyka info``.
  Devices are probed in order and only when needed (:class:`Selection`): the default device
  costs the probes of the devices up to it, the full list costs them all.
  The kernel's run is bounded (``ALPYKA_OPENCL_PROBE_TIMEOUT``); a compiler that never returns
  is not (pyopencl's build cannot be abandoned), though a Ctrl-C on the main thread does not wait
  for it (:func:`build`).
- **Order** (``pk.devices("opencl")``, device 0 is the default): GPUs, then other accelerators,
  then CPU devices, the CPU runtimes by measured speed (Intel's, then PoCL, then others), each
  group in platform order; simulators (Oclgrind, Intel's FPGA emulator) last, and left out
  unless named.
- **Override.** ``ALPYKA_OPENCL_DEVICE=pattern[,pattern...]``: only the devices whose platform
  name, vendor or version contains a pattern (case-insensitive: ``intel``, ``pocl``, ``nvidia``,
  ``oclgrind``), or whose device name contains ``TEXT`` for a pattern ``device=TEXT``, in the
  order of the patterns; ``all`` adds every probed device in the default order, simulators
  included.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import re
import shutil
import site
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from portable import EnvVarError
from portable.env import env_number

from ._off_main import call_off_main

ENV_DEVICE = "ALPYKA_OPENCL_DEVICE"
ENV_VENDORS = "OCL_ICD_VENDORS"
ENV_PROBE_TIMEOUT = "ALPYKA_OPENCL_PROBE_TIMEOUT"
SYSTEM_VENDORS = Path("/etc/OpenCL/vendors")
#: CPU runtimes by measured speed on alpyka's kernels (docs/backends.md); earlier is preferred
CPU_RUNTIME_ORDER = ("intel", "portable computing language")
SIMULATORS = ("oclgrind", "fpga emulation")

_PROBE_SOURCE = """\
__kernel void alpyka_probe(__global int* out, __local int* tmp) {
    int l = (int)get_local_id(0), g = (int)get_global_id(0), n = (int)get_local_size(0);
    tmp[l] = 3 * g + 1;
    barrier(CLK_LOCAL_MEM_FENCE);
    out[g] = tmp[n - 1 - l] + (int)get_group_id(0);
}
"""
_PROBE_BLOCKS, _PROBE_THREADS = 3, 16
# commands of a probe that never completed: kept alive forever, so no destructor waits for them
_abandoned: list[Any] = []


@dataclass
class Candidate:
    """One OpenCL device found on the machine, and what became of it."""

    platform: Any
    device: Any
    hardware: str  # "gpu", "cpu", "accelerator" or "other"
    context: Any = None
    reason: str | None = None  # why it is not used (None: used)
    probe_s: float = 0.0

    @property
    def label(self) -> str:
        return f"{self.platform.name.strip()} {self.device.name.strip()}"

    @property
    def names(self) -> str:
        """What an ``ALPYKA_OPENCL_DEVICE`` pattern matches: the platform's name, vendor and version
        (where PoCL says "PoCL"), lower-cased. Not the device's name: CPU devices are named after
        the CPU ("AMD EPYC" on Intel's runtime), so "intel" or "amd" would pick the wrong runtime."""
        p = self.platform
        return f"{p.name} {p.vendor} {p.version}".lower()

    def matches(self, pattern: str) -> bool:
        """``pattern`` (lower-case) names this device: ``all``, a platform pattern, or
        ``device=<part of the device's name>``."""
        if pattern == "all":
            return True
        if pattern.startswith("device="):
            return pattern[len("device=") :].strip() in self.device.name.lower()
        return pattern in self.names

    @property
    def simulator(self) -> bool:
        return any(s in f"{self.names} {self.device.name.lower()}" for s in SIMULATORS)


# ---------------------------------------------------------------------- registration
def _prefixes() -> list[Path]:
    out: list[Path] = []
    for p in (sys.prefix, site.getuserbase() if site.ENABLE_USER_SITE else None):
        if p and Path(p) not in out:
            out.append(Path(p))
    return out


def _pip_icds() -> dict[str, str]:
    """``{icd file name: library path}`` of runtimes pip installed under this Python's prefixes,
    each library path resolved to the file that exists (their ``.icd`` holds a build-time path)."""
    found: dict[str, str] = {}
    for prefix in _prefixes():
        vendors = prefix / "etc" / "OpenCL" / "vendors"
        if not vendors.is_dir():
            continue
        for icd in sorted(vendors.glob("*.icd")):
            lib = icd.read_text(errors="replace").strip()
            path = Path(lib) if os.path.isabs(lib) else None
            if path is None or not path.exists():
                path = prefix / "lib" / Path(lib).name
            if path.exists():
                found.setdefault(icd.name, str(path))
    return found


def _vendors_root() -> Path:
    """``$ALPYKA_CACHE_DIR/opencl-vendors``; OSError when the cache directory is not private to
    this user along its path (the ICD loader would load the libraries an entry there names)."""
    from portable.compiler import cache_dir, trust

    root = cache_dir()
    trust.make_private_dirs(root)
    problem = trust.path_problem(root)
    if problem is not None:
        raise OSError(f"{root} is not private to this user ({problem})")
    return root / "opencl-vendors"


def _private_dir(path: Path) -> bool:
    """Whether ``path`` is a real directory (not a link) of this user that no one else may write:
    only then can what is in it be trusted (a predictable name in a shared ``/tmp`` may have been
    made by anyone). The one check every cache shares: :mod:`portable.compiler.trust`."""
    from portable.compiler import trust

    return trust.private_dir(path)


def _tmp_root() -> Path:
    """``<tmp>/alpyka-opencl-vendors-<uid>``, made private (0700) by this user; when the name is
    taken by a directory someone else could write (or a link, or a file), a fresh private
    directory of this process instead (removed at exit)."""
    root = Path(tempfile.gettempdir()) / f"alpyka-opencl-vendors-{os.geteuid()}"
    with contextlib.suppress(FileExistsError):
        os.mkdir(root, 0o700)
    if _private_dir(root):
        return root
    fresh = Path(tempfile.mkdtemp(prefix="alpyka-opencl-vendors-"))
    atexit.register(shutil.rmtree, fresh, True)
    return fresh


def _holds(target: Path, files: dict[str, str]) -> bool:
    """Whether the vendors directory ``target`` holds exactly ``files`` (an entry changed on disk
    would load another library)."""
    try:
        found = {p.name: p.read_text(errors="replace").strip() for p in target.iterdir()}
    except OSError:
        return False
    return found == files


def _write_vendors(root: Path, digest: str, files: dict[str, str], private: bool) -> Path:
    """``root/digest`` holding ``files`` (written once, atomically, verified at each use); in the
    temporary directory every level must be :func:`_private_dir`. OSError when it cannot be made."""
    target = root / digest
    if _holds(target, files) and (not private or (_private_dir(root) and _private_dir(target))):
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root))  # 0700, this user's: what is written here is ours
    try:
        for name, lib in files.items():
            (tmp / name).write_text(lib + "\n")
        os.chmod(tmp, 0o755 & ~_umask())
        try:
            os.replace(tmp, target)  # atomic; a concurrent process may have won
        except OSError:
            if os.path.isdir(target) and not os.path.islink(target) and not _holds(target, files):
                shutil.rmtree(target)  # a damaged entry: replaced
                os.replace(tmp, target)
        if _holds(target, files) and (not private or _private_dir(target)):
            return target
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    raise OSError(f"{target} does not hold the vendors files alpyka wrote")


def _umask() -> int:
    """The process's umask (read from /proc where possible: setting it to read it is racy)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def register_runtimes() -> str | None:
    """Point ``OCL_ICD_VENDORS`` at a directory with the system's and the pip-installed runtimes;
    returns it, or None when the user set the variable or pip installed no runtime."""
    if os.environ.get(ENV_VENDORS):
        return None
    pip = _pip_icds()
    if not pip:
        return None
    files: dict[str, str] = {}
    if SYSTEM_VENDORS.is_dir():
        for icd in sorted(SYSTEM_VENDORS.glob("*.icd")):
            files[icd.name] = icd.read_text(errors="replace").strip()
    for name, lib in pip.items():
        files.setdefault(name, lib)
    digest = hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()[:16]
    for in_tmp in (False, True):
        try:
            root = _tmp_root() if in_tmp else _vendors_root()
            target = _write_vendors(root, digest, files, True)
        except OSError:
            continue
        os.environ[ENV_VENDORS] = str(target)
        return str(target)
    return None


# ---------------------------------------------------------------------- program builds
#: pyopencl's cache of built programs per directory: the directory, or False (build uncached)
_program_caches: dict[str, str | bool] = {}


def program_cache() -> str | bool:
    """The ``cache_dir`` for pyopencl's builds: ``$ALPYKA_CACHE_DIR/opencl-programs`` when it can
    be written and the cache directory is private to this user along its path, else False
    (uncached builds, one warning naming ``ALPYKA_CACHE_DIR``)."""
    from portable.compiler import cache_dir, private_cache, trust, warn_cache_unwritable

    where = cache_dir() / "opencl-programs"
    got = _program_caches.get(str(where))
    if got is None and private_cache() is None:  # pyopencl unpickles what it finds there
        got = _program_caches[str(where)] = False
    if got is None:
        try:
            trust.make_private_dirs(where)
            tempfile.TemporaryFile(dir=where).close()  # pyopencl would wait a minute on its lock
            got = str(where)
        except OSError as exc:
            warn_cache_unwritable(where, exc)
            got = False
        _program_caches[str(where)] = got
    return got


def _check_invoker_cache(cl: Any) -> None:
    """pyopencl keeps the argument setters of kernels in a pytools database in the user's cache
    directory (``~/.cache/pytools``), made when the first ``cl.Kernel`` sets its arguments; where
    that directory cannot be written every kernel would fail, so pyopencl's caches are turned off
    first (one warning)."""
    if "pyopencl.invoker" in sys.modules or getattr(cl, "_PYOPENCL_NO_CACHE", True):
        return
    try:
        import platformdirs

        where = Path(platformdirs.user_cache_dir("pytools", "pytools"))
        where.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=where).close()
    except ImportError:
        return
    except OSError as exc:
        from portable.compiler import warn_cache_unwritable

        warn_cache_unwritable(where, exc, "XDG_CACHE_HOME")
        # pyopencl's own switch, which it has no public setter for: read at each build and when it
        # makes the argument setters
        cl._PYOPENCL_NO_CACHE = True  # noqa: SLF001 - pyopencl's switch, no public setter


#: seconds to wait at most for pyopencl's cache lock, which it holds only while it looks a binary
#: up or stores one (milliseconds): pyopencl's own wait is a minute, then an error
PYOPENCL_LOCK_WAIT_S = 10.0


def _lock_free(cache: str) -> bool:
    """Whether pyopencl's lock file of the program cache ``cache`` is free within
    ``min(ALPYKA_LOCK_WAIT, PYOPENCL_LOCK_WAIT_S)`` seconds; else one warning naming the holder
    (this process then builds without the cache)."""
    from portable.compiler import lock_file_free

    lock = Path(cache) / "lock"
    instead = f"this process builds its OpenCL programs without the cache (delete {lock} if no process holds it)"
    return lock_file_free(lock, PYOPENCL_LOCK_WAIT_S, instead)


def build(cl: Any, context: Any, source: str, devices: list, options: list[str] | None = None) -> Any:
    """``cl.Program(context, source)`` built for ``devices``, through pyopencl's binary cache in
    :func:`program_cache` (none where pyopencl's caches are off: ``PYOPENCL_NO_CACHE``). A cache
    that fails while writing (a full disk; pyopencl then raises
    ``KeyError('PYOPENCL_CACHE_FAILURE_FATAL')``) is turned off for this process, with one
    warning, and the program built again without it. On the main thread a helper thread builds
    it, so that a Ctrl-C is not held up by the runtime's compiler (backends/_off_main.py); a
    request for a program whose build a caught Ctrl-C left running waits for that build (its
    program, or its error) instead of building it a second time beside it."""
    key = ("opencl-program", _handle(context), tuple(_handle(d) for d in devices), source, tuple(options or ()))
    return call_off_main(lambda: _build(cl, context, source, devices, options), key=key)


def _handle(obj: Any) -> int:
    """The OpenCL handle of a pyopencl object (two wrappers of one context are one context); the
    object's identity where it has none (it is kept alive by the call that the key names)."""
    ptr = getattr(obj, "int_ptr", None)
    return ptr if isinstance(ptr, int) else id(obj)


def _build(cl: Any, context: Any, source: str, devices: list, options: list[str] | None) -> Any:
    """:func:`build`'s work, in the thread that makes it."""
    _check_invoker_cache(cl)
    kw: dict[str, Any] = {"options": options} if options else {}
    cache: str | bool = False
    if not getattr(cl, "_PYOPENCL_NO_CACHE", True):  # pyopencl with its caches on
        cache = program_cache()  # False: none (pyopencl's default is elsewhere)
        if cache is not False and not _lock_free(str(cache)):
            cache = _program_caches[str(cache)] = False
        kw["cache_dir"] = cache
    try:
        return cl.Program(context, source).build(devices=devices, **kw)
    except KeyError as exc:
        if exc.args != ("PYOPENCL_CACHE_FAILURE_FATAL",) or cache is False:
            raise
        from portable.compiler import warn_cache_unwritable

        cause: BaseException = exc
        while isinstance(cause, KeyError) and cause.__context__ is not None:
            cause = cause.__context__  # os.environ's own KeyError, then what failed in the cache
        warn_cache_unwritable(cache, cause)
        _program_caches[str(cache)] = False
    return cl.Program(context, source).build(devices=devices, **{**kw, "cache_dir": False})


# ---------------------------------------------------------------------- probe
def hardware_type(cl: Any, device: Any) -> str:
    """ "gpu", "cpu", "accelerator" or "other" (PoCL reports its CPU device as ``ALL | CPU``)."""
    for bit, name in (
        (cl.device_type.GPU, "gpu"),
        (cl.device_type.CPU, "cpu"),
        (cl.device_type.ACCELERATOR, "accelerator"),
    ):
        if device.type & bit:
            return name
    return "other"


def _first_line(text: str, limit: int = 300) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    err = next((ln for ln in lines if "error" in ln.lower() and "build" not in ln.lower()[:12]), None)
    line = err or (lines[0] if lines else "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


#: pyopencl's note at the end of a failed build's message: it saved a copy of the source in the
#: temporary directory (the compiler's log before it may quote anything, so only the end counts)
_SAVED_SOURCE = re.compile(r"\n?\(source saved as ([^\n]+\.cl)\)\s*\Z")


def build_log(exc: Exception) -> str:
    """The text of pyopencl's build error without its closing note on the copy of the source it
    saved in the temporary directory; the copy is removed (callers show the source themselves,
    and pyopencl left one file per failed build)."""
    text = str(exc)
    m = _SAVED_SOURCE.search(text)
    if m is None:
        return text
    path = m.group(1)
    if os.path.dirname(os.path.abspath(path)) == os.path.abspath(tempfile.gettempdir()):
        try:
            os.remove(path)
        except OSError:
            pass  # already gone: the message is what the caller needs
    return text[: m.start()] + text[m.end() :]


def probe(cl: Any, cand: Candidate, timeout: float | None = None) -> None:
    """Build and run the probe kernel on ``cand``; sets ``cand.context`` or ``cand.reason``."""
    # A probe a Ctrl-C interrupted keeps nothing in memory: the next one makes a new context and
    # builds again. What finished is kept where it is safe: a build that returned had stored its
    # binary in pyopencl's program cache (:func:`build`, before it returns), so the next probe,
    # in this process or the next, loads it (Intel's CPU runtime: 3 ms against 160 ms from
    # source; a whole probe then 5-36 ms). A build the Ctrl-C cut short (the process ends under
    # it, backends/_off_main.py) never finished: building again is the only answer. The context
    # is not kept: after the enqueue it may still run the abandoned probe command, which no one
    # waits for (it stays in _abandoned), and the device would be used in that context; before
    # the enqueue keeping it would be safe (the next build would join one still running on it),
    # but saves 20-40 ms once, in a session that caught the Ctrl-C, for state every probe carries.
    if timeout is None:
        timeout = env_number(ENV_PROBE_TIMEOUT, 60.0, float, above=0)
    start = time.perf_counter()
    try:
        ctx = cl.Context([cand.device])
        program = build(cl, ctx, _PROBE_SOURCE, [cand.device])
    except Exception as exc:  # noqa: BLE001 - a runtime that cannot build: its reason is kept
        cand.reason = f"cannot build a kernel: {_first_line(build_log(exc))}"
        return
    threads = min(_PROBE_THREADS, int(cand.device.max_work_group_size))
    n = _PROBE_BLOCKS * threads
    host = np.full(n, -1, np.int32)
    try:
        cq = cl.CommandQueue(ctx, cand.device)
        buf = cl.Buffer(ctx, cl.mem_flags.WRITE_ONLY, host.nbytes)
        knl = cl.Kernel(program, "alpyka_probe")
        knl.set_args(buf, cl.LocalMemory(4 * threads))
        run = cl.enqueue_nd_range_kernel(cq, knl, (n,), (threads,))
        cq.flush()
        try:
            completed = _wait(cl, run, start + timeout)
        except BaseException as exc:
            if not isinstance(exc, Exception):  # a Ctrl-C while the kernel may run: never waited for
                _abandoned.extend((cq, buf, knl, run, ctx))
            raise
        if not completed:
            _abandoned.extend((cq, buf, knl, run, ctx))
            cand.reason = f"the probe kernel did not complete within {timeout:.0f} s"
            return
        cl.enqueue_copy(cq, host, buf, is_blocking=True)
    except Exception as exc:  # noqa: BLE001 - a runtime that cannot run what it built
        cand.reason = f"cannot run a kernel: {type(exc).__name__}: {_first_line(exc)}"
        return
    g = np.arange(n)
    want = 3 * ((g // threads) * threads + threads - 1 - g % threads) + 1 + g // threads
    if not np.array_equal(host, want):
        bad = int(np.flatnonzero(host != want)[0])
        cand.reason = (
            f"the probe kernel gave a wrong result (element {bad}: {int(host[bad])}, expected {int(want[bad])})"
        )
        return
    cand.context, cand.probe_s = ctx, time.perf_counter() - start


def _wait(cl: Any, event: Any, deadline: float) -> bool:
    complete = cl.command_execution_status.COMPLETE
    delay = 0.001
    while True:
        status = event.command_execution_status
        if status < 0:
            raise RuntimeError(f"the probe kernel ended with OpenCL status {status}")
        if status == complete:
            return True
        if time.perf_counter() > deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


# ---------------------------------------------------------------------- order and selection
def _default_rank(cand: Candidate) -> tuple[int, int]:
    group = 4 if cand.simulator else {"gpu": 0, "accelerator": 1, "cpu": 2}.get(cand.hardware, 3)
    runtime = len(CPU_RUNTIME_ORDER)
    if cand.hardware == "cpu":
        name = cand.platform.name.lower()
        runtime = next((i for i, r in enumerate(CPU_RUNTIME_ORDER) if r in name), runtime)
    return group, runtime


def patterns() -> list[str] | None:
    """The patterns of ``ALPYKA_OPENCL_DEVICE``, lower-cased (None when it is not set); an
    EnvVarError for a number, which reads as a device index and is none (:func:`_not_an_index`)."""
    raw = os.environ.get(ENV_DEVICE, "").strip()
    if not raw:
        return None
    found = [p.strip().lower() for p in raw.split(",") if p.strip()]
    for pattern in found:
        _not_an_index(pattern, raw)
    return found


def _not_an_index(pattern: str, raw: str) -> None:
    """EnvVarError for a pattern that is a whole number: ``ALPYKA_OPENCL_DEVICE=1``, meant as the
    second device (as CUDA_VISIBLE_DEVICES=1), matched the "1" of Intel's "OpenCL 3.1" and ran on
    Intel's runtime, not PoCL, saying nothing."""
    if pattern.isdigit():
        raise EnvVarError(
            f"environment variable {ENV_DEVICE}={raw!r}: {pattern!r} is a number, and patterns are part of a "
            f"platform's name, vendor or version, not device indices; name the runtime (pocl, intel, nvidia) "
            f"or the device (device=TEXT), or take device {pattern} with pk.device('opencl', {pattern})"
        )


class Selection:
    """The devices the backend may use, in order, each probed only when it is first needed: the
    default device (the first that passes) probes the devices before it and no further, so a
    process on device 0 never builds the probe on the runtimes it does not use; the others are
    probed when the whole list (``pk.devices``, a device index above 0, ``alpyka info``) is asked
    for. A device that fails its probe is never used and never numbered."""

    def __init__(self, cl: Any, found: list[tuple[Any, Any]]) -> None:
        self._cl = cl
        self.candidates, self._pending = _order(cl, found)
        self.used: list[Candidate] = []

    def probe_until(self, count: int | None) -> list[Candidate]:
        """The first ``count`` usable devices (all of them for None; fewer when fewer pass),
        probing the pending candidates in order until there are that many. A candidate leaves the
        pending list only once its probe ended and its outcome is kept: a Ctrl-C (or any exception)
        during a probe leaves the selection as if that probe had not started (the device is
        probed again at the next request), and one that lands after the probe ended keeps its
        outcome once (:func:`probe` sets ``context`` or ``reason`` only as it ends)."""
        while self._pending and (count is None or len(self.used) < count):
            cand = self._pending[0]
            if cand.context is None and cand.reason is None:
                probe(self._cl, cand)
            if cand.reason is None and all(c is not cand for c in self.used):
                self.used.append(cand)
            del self._pending[0]
        return self.used if count is None else self.used[:count]

    @property
    def settled(self) -> bool:
        """Whether every candidate was probed (the lists of used and rejected devices are final)."""
        return not self._pending

    def rejected(self) -> list[Candidate]:
        """The devices found but not used so far, each with its reason, in platform order."""
        return [c for c in self.candidates if c.reason is not None]


def _order(cl: Any, found: list[tuple[Any, Any]]) -> tuple[list[Candidate], list[Candidate]]:
    """``(every candidate in platform order, those to probe in order)``: the others have their
    reason (a simulator left out by default, or not named by ``ALPYKA_OPENCL_DEVICE``)."""
    cands = [Candidate(p, d, hardware_type(cl, d)) for p, d in found]
    ordered = sorted(cands, key=_default_rank)  # stable: platform order within a rank
    wanted = patterns()
    chosen: list[Candidate] = []
    if wanted is None:
        for c in ordered:
            if c.simulator:
                c.reason = f"a simulator, left out by default ({ENV_DEVICE}={_short(c)} selects it)"
            else:
                chosen.append(c)
    else:
        for pat in wanted:
            for c in ordered:
                if c not in chosen and c.matches(pat):
                    chosen.append(c)
        for c in ordered:
            if c not in chosen:
                c.reason = f"not named by {ENV_DEVICE}={os.environ[ENV_DEVICE]}"
    return cands, chosen


def select(cl: Any, found: list[tuple[Any, Any]]) -> tuple[list[Candidate], list[Candidate]]:
    """``(used, rejected)``: the devices the backend exposes, in order, each probed; and the
    others, each with its reason (every candidate probed: :class:`Selection` probes lazily)."""
    sel = Selection(cl, found)
    return sel.probe_until(None), sel.rejected()


def _short(c: Candidate) -> str:
    return c.platform.name.strip().split()[0].lower()
