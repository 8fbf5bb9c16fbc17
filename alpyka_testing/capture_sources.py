"""A pytest plugin that keeps the generated text of every kernel a run builds, to show that a
change of the emitters or the front end leaves existing kernels' text byte-identical.

Run a test selection twice, on the tree before and after the change, each into its own folder::

    ALPYKA_CAPTURE_SOURCES=/tmp/before python -m pytest -p alpyka_testing.capture_sources \\
        tests/kernels --backends=cpu_serial -n 0 --timeout=0
    python -m alpyka_testing.capture_sources /tmp/before /tmp/after

Each IR the run builds (``Kernel.ir``) is emitted as numba (cpu_serial's and cpu_threads') and as
C (OpenCL, CUDA, HIP; chunked and one element per thread; with and without the emulator's
checks): one file per distinct content, its first line naming the kernel and its signature. The
comparison keeps only the file names of source paths (two checkouts, temporary folders) and
reports the kernels whose text differs.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys

_VARIANTS = [(d, unit, checks) for d in ("opencl", "cuda", "hip") for unit in (False, True) for checks in (False, True)]


def _emit_all(k) -> str:
    from backends._c_emit import emit
    from backends._numba_emit import emit_numba

    parts = []
    for serial in (True, False):
        try:
            parts.append(f"== numba serial={serial}\n" + emit_numba(k, serial).source)
        except Exception as exc:  # noqa: BLE001 - an emitter's refusal is part of its output
            parts.append(f"== numba serial={serial} ERROR {type(exc).__name__}: {exc}")
    for d, unit, checks in _VARIANTS:
        try:
            parts.append(f"== {d} unit={unit} checks={checks}\n" + emit(k, d, unit, checks).text)
        except Exception as exc:  # noqa: BLE001
            parts.append(f"== {d} unit={unit} checks={checks} ERROR {type(exc).__name__}: {exc}")
    return "\n".join(parts)


def pytest_configure(config) -> None:
    out = os.environ.get("ALPYKA_CAPTURE_SOURCES")
    if not out:
        return
    from portable.compiler import _kernel

    os.makedirs(out, exist_ok=True)
    original = _kernel.Kernel.ir

    def ir(self, key, ndim, debug):
        got = original(self, key, ndim, debug)
        text = f"{self.__qualname__} {key!r} ndim={ndim} debug={debug}\n" + _emit_all(got)
        with open(os.path.join(out, hashlib.sha256(text.encode()).hexdigest()[:24]), "w") as f:
            f.write(text)
        return got

    _kernel.Kernel.ir = ir


def _load(folder: str) -> dict[str, set[str]]:
    """tag -> the normalised texts captured under it."""
    out: dict[str, set[str]] = {}
    for name in os.listdir(folder):
        with open(os.path.join(folder, name)) as f:
            t = f.read()
        t = re.sub(r"/[^\s:'\"()]*/([^/\s:'\"()]+\.py)", r"\1", t)  # two checkouts: file names only
        tag, body = t.split("\n", 1)
        out.setdefault(tag, set()).add(body)
    return out


def compare(before: str, after: str) -> int:
    """Print the comparison of two capture folders; the number of kernels whose text differs."""
    a, b = _load(before), _load(after)
    common = a.keys() & b.keys()
    differ = sorted(k for k in common if a[k] != b[k])
    texts = sum(len(a[k]) for k in common)
    sources = texts * (2 + len(_VARIANTS))
    print(f"{len(common)} kernel IRs in both ({texts} texts, {sources} sources): {len(differ)} differ")
    print(f"only before: {len(a.keys() - b.keys())}, only after: {len(b.keys() - a.keys())}")
    for k in differ:
        print("differs:", k[:200])
    return len(differ)


if __name__ == "__main__":
    sys.exit(1 if compare(sys.argv[1], sys.argv[2]) else 0)
