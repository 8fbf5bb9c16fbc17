"""User input never meets a bare builtin: ``soa``, ``inference``, ``portable`` (the kernel compiler,
``pk.capture``, ``pk.data``, ``pk.distributed``, collections, the runtime core) and ``backends`` raise
alpyka's own errors, which still are the builtin (``pk.ArgumentError`` a ``ValueError``,
``pk.ArgumentTypeError`` a ``TypeError``, ``pk.NameNotFound`` a ``KeyError``, ``pk.StateError`` a
``RuntimeError``, ``pk.FileNotFound`` a ``FileNotFoundError``, ``pk.Timeout`` a ``TimeoutError``,
``pk.OutOfMemory`` a ``MemoryError``, the C emitter's ``CEmitError`` a ``NotImplementedError``). A
new ``raise ValueError(...)`` (or TypeError, KeyError, IndexError, LookupError, RuntimeError,
FileNotFoundError, TimeoutError, MemoryError, a ``NotImplementedError`` with a message) there fails
here; a raise no user input reaches, a bug of alpyka if hit, is listed in :data:`INTERNAL` with the
reason. A bare ``raise NotImplementedError`` (no message) is an abstract method's: a subclass's
obligation, never a user's."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pytest

import portable as pk
import soa._errors

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ["soa", "inference", "portable", "backends"]
BARE = {
    "ValueError",
    "TypeError",
    "KeyError",
    "IndexError",
    "LookupError",
    "RuntimeError",
    "NotImplementedError",
    "FileNotFoundError",
    "TimeoutError",
    "MemoryError",
}
#: a folder whose raises are not alpyka's own words
NOT_SCANNED = {
    "backends/emulator": "the GPU emulator stands in for cupy and the CUDA runtime and raises what they raise; "
    "alpyka's launcher checks a launch before it gets there",
}
#: ``file:function:builtin`` -> why no user input reaches it
INTERNAL = {
    "inference/_torch_queue.py:_native_stream_pointer:TypeError": "a backend whose queue gives torch no native stream: "
    "a backend's bug",
    "inference/_tensors.py:flat_tensor:RuntimeError": "a device whose buffers have neither an array nor a pointer: "
    "a backend's bug",
    "portable/cli/_reference.py:_import_file:FileNotFoundError": "caught: the reference's BadReference names it",
    "portable/caches.py:LRUCache.__getitem__:KeyError": "the mapping protocol: KeyError(key), as a dict's",
    "portable/spi.py:Backend.launch:NotImplementedError": "the interface's abstract launch: a backend's duty",
    "portable/compiler/_errors.py:KernelCheckError.__init__:ValueError": "a check kind comes from alpyka's own checks",
    "portable/compiler/_inline.py:_Inliner.stmt:TypeError": "an IR statement the inliner lacks: a compiler bug",
    "portable/compiler/_library.py:library_function:LookupError": "import portable registers the kernel library",
    "portable/compiler/types.py:ScalarType.__post_init__:TypeError": "built from names scalar_type() checked",
    "portable/compiler/types.py:ArrayType.__post_init__:ValueError": "array kinds are the front end's",
    "portable/compiler/visit.py:Visitor.missing:NotImplementedError": "an IR node a visitor lacks: a compiler bug",
    "backends/_c_args.py:make_packer:ValueError": "argument kinds are the C emitter's",
    "backends/_c_dialect.py:Dialect.math:KeyError": "math functions come from the front end's table",
    "backends/_cupy_queue.py:CupyQueue.make_gate:NotImplementedError": "never called on a cupy queue",
    "backends/_numba_atomics.py:_new_value:NotImplementedError": "atomic operations come from the front end's table",
    "backends/_opencl_devices.py:_wait:RuntimeError": "the probe's: caught, the device's reason",
    "backends/_other_load.py:cpu_jiffies:ValueError": "caught by its callers: no load reading",
}


def _files() -> list[Path]:
    out = []
    for entry in SCANNED:
        path = ROOT / entry
        out.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return [p for p in out if not any(p.is_relative_to(ROOT / skip) for skip in NOT_SCANNED)]


def _is_abstract(node: ast.Raise) -> bool:
    """``raise NotImplementedError`` with no message: an abstract method's."""
    exc = node.exc
    return isinstance(exc, ast.Name) or (isinstance(exc, ast.Call) and not exc.args and not exc.keywords)


def _bare_raises(path: Path) -> list[tuple[int, str, str]]:
    """``(line, enclosing function's qualified name, builtin)`` of each bare builtin raised."""
    found: list[tuple[int, str, str]] = []

    def walk(node: ast.AST, scope: tuple[str, ...]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                walk(child, (*scope, child.name))
                continue
            if isinstance(child, ast.Raise) and child.exc is not None:
                exc = child.exc.func if isinstance(child.exc, ast.Call) else child.exc
                if isinstance(exc, ast.Name) and exc.id in BARE:
                    if not (exc.id == "NotImplementedError" and _is_abstract(child)):
                        found.append((child.lineno, ".".join(scope) or "<module>", exc.id))
            walk(child, scope)

    walk(ast.parse(path.read_text(), str(path)), ())
    return found


def _keyed() -> list[tuple[str, int]]:
    """``(file:function:builtin, line)`` of every bare raise scanned."""
    out = []
    for path in _files():
        rel = path.relative_to(ROOT).as_posix()
        out += [(f"{rel}:{func}:{name}", line) for line, func, name in _bare_raises(path)]
    return out


def test_no_bare_builtin_raised_on_user_input():
    offenders = [f"{key} (line {line})" for key, line in _keyed() if key not in INTERNAL]
    assert not offenders, (
        "raise pk.ArgumentError/ArgumentTypeError/NameNotFound/StateError/FileNotFound/Timeout/OutOfMemory "
        "(or the package's own error) "
        f"instead, or list a raise no user reaches in INTERNAL with the reason: {offenders}"
    )


def test_the_internal_list_is_current():
    bare = {key for key, _ in _keyed()}
    assert set(INTERNAL) <= bare, f"no longer raised, drop from INTERNAL: {sorted(set(INTERNAL) - bare)}"


def test_the_scan_finds_what_it_should(tmp_path: Path):
    """The scan sees a bare raise inside a method, leaves an abstract method's alone, and reads the
    packages it names (a scan that reads nothing passes everything)."""
    src = (
        "class A:\n    def f(self):\n        raise RuntimeError('x')\n"
        "    def g(self):\n        raise NotImplementedError\n"
        "    def h(self):\n        raise NotImplementedError('not on this backend')\n"
        "def k():\n    raise pk.ArgumentError('fine')\n"
    )
    src += "def t():\n    raise TimeoutError('late')\ndef m():\n    raise MemoryError\n"
    path = tmp_path / "scan_probe.py"
    path.write_text(src)
    assert _bare_raises(path) == [
        (3, "A.f", "RuntimeError"),
        (7, "A.h", "NotImplementedError"),
        (11, "t", "TimeoutError"),
        (13, "m", "MemoryError"),
    ]
    scanned = {p.relative_to(ROOT).parts[0] for p in _files()}
    assert scanned == set(SCANNED) and len(_files()) > 100


def test_the_root_classes_are_one_set_of_objects():
    """soa defines the root (the lowest layer raises it too); portable exports the same classes."""
    names = ("AlpykaError", "ArgumentError", "ArgumentTypeError", "NameNotFound", "StateError", "FileNotFound")
    for name in (*names, "Timeout", "OutOfMemory"):
        assert getattr(pk, name) is getattr(soa._errors, name)
        assert name in pk.__all__
    assert issubclass(pk.NameNotFound, pk.AlpykaError) and issubclass(pk.NameNotFound, KeyError)


@pytest.mark.parametrize(
    "cls,builtin",
    [
        (pk.NameNotFound, KeyError),
        (pk.ArgumentError, ValueError),
        (pk.ArgumentTypeError, TypeError),
        (pk.StateError, RuntimeError),
        (pk.FileNotFound, FileNotFoundError),
        (pk.Timeout, TimeoutError),
        (pk.OutOfMemory, MemoryError),
    ],
)
def test_messages_read_as_written_and_pickle(cls, builtin):
    """``str()`` is the message (a plain KeyError's is its repr: quotes, escaped newlines), and an
    error crosses a process boundary (Dask workers, the server) as itself."""
    msg = "no block 'x'\nits blocks are ['a']"
    err = cls(msg)
    assert str(err) == msg
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls and str(back) == msg
    assert issubclass(cls, builtin) and str(cls("a", "b")) == str(builtin("a", "b"))  # several: the builtin's text
