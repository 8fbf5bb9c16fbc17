"""One error root: every exception class defined in portable, backends, soa and inference derives
from ``portable.AlpykaError`` and can be imported from a public (non-underscore) module."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import warnings

import pytest

from portable import AlpykaError, AlpykaWarning

PACKAGES = ("portable", "backends", "soa", "inference")
# Optional dependencies: a module that fails to import for want of one of these is skipped.
OPTIONAL = {
    "tritonclient",
    "pytriton",
    "uproot",
    "awkward",
    "dask",
    "distributed",
    "torch",
    "onnxruntime",
    "onnx",
    "pyopencl",
    "cupy",
    "numba",
    "gevent",
    "geventhttpclient",
    "grpc",
    "h5py",
    "matplotlib",
    "sklearn",
    "scipy",
    "psutil",
    "cuda",
    "nvidia",
}


def _import(name: str, found: dict, missing: dict) -> None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found[name] = importlib.import_module(name)
    except ImportError as e:
        root = (e.name or "").split(".")[0]
        if root not in OPTIONAL:
            raise
        missing[name] = f"needs {root}"


def _modules() -> tuple[dict[str, object], dict[str, str]]:
    """Every importable module of the four packages, and why each other one was left out."""
    found, missing = {}, {}
    for pkg_name in PACKAGES:
        _import(pkg_name, found, missing)
        if pkg_name not in found:
            continue
        for m in pkgutil.walk_packages(found[pkg_name].__path__, pkg_name + ".", onerror=lambda n: None):
            if not m.name.endswith("__main__"):  # running it is the point of importing it
                _import(m.name, found, missing)
    return found, missing


MODULES, MISSING = _modules()


def _classes(base: type) -> dict[str, type]:
    out = {}
    for mod in MODULES.values():
        for _, cls in inspect.getmembers(mod, inspect.isclass):
            if issubclass(cls, base) and cls.__module__.split(".")[0] in PACKAGES:
                out[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return out


EXCEPTIONS = {k: c for k, c in _classes(BaseException).items() if not issubclass(c, Warning)}
WARNINGS = _classes(Warning)
#: errors that never reach user code, so need no public name: each is caught inside the library
INTERNAL = {
    "backends._c_source.CEmitError": "the GPU launchers turn it into a KernelSyntaxError",
    "inference.serving._models.StartupError": "the server process reports it; serve() raises ServeError",
    "portable.compiler._folding.ConstantError": "the front-end turns it into a KernelSyntaxError at the user's line",
    "backends._hip_toolchain.Unavailable": (
        "the HIP check warns once with its reason (AlpykaWarning) and runs unchecked"
    ),
    "inference._zip_layout.ZipLayoutError": "inference._loading turns it into a ModelFileError naming the file",
}


def test_modules_found():
    assert len(MODULES) > 20 and "portable.compiler" in MODULES
    if MISSING:
        print("left out (optional dependency missing):", MISSING)


def test_every_exception_derives_from_alpyka_error():
    offenders = sorted(name for name, cls in EXCEPTIONS.items() if not issubclass(cls, AlpykaError))
    assert not offenders, f"not AlpykaError subclasses: {offenders}"


def test_cemit_error_derives_from_alpyka_error():
    from backends._c_source import CEmitError

    assert issubclass(CEmitError, AlpykaError) and issubclass(CEmitError, NotImplementedError)


def test_every_exception_unpickles_through_its_new():
    """tblib, which Dask installs in every process, unpickles an error as ``cls.__new__(cls)``:
    a class whose built-in bases disagree on the constructor (``class E(AlpykaError, MemoryError)``:
    MemoryError's own ``__new__`` refuses it as "not safe") raised in a Dask worker could not cross
    back. Put such a builtin first among the bases (``pk.OutOfMemory``)."""
    unsafe = []
    for name, cls in EXCEPTIONS.items():
        try:
            cls.__new__(cls)
        except TypeError as exc:
            if "is not safe" in str(exc):
                unsafe.append(f"{name}: {exc}")
    assert not unsafe, unsafe


def test_every_warning_derives_from_alpyka_warning():
    offenders = sorted(name for name, cls in WARNINGS.items() if not issubclass(cls, AlpykaWarning))
    assert not offenders, f"not AlpykaWarning subclasses: {offenders}"


def test_errors_keep_their_builtin_base():
    """Each refines a builtin too, so ``except ValueError`` and the like keep working."""
    from portable import CollectionTooLarge, KernelBuildError, KernelSyntaxError, NotARootFile
    from portable.distributed import ChunkError

    assert issubclass(KernelBuildError, RuntimeError) and issubclass(KernelSyntaxError, SyntaxError)
    assert issubclass(ChunkError, RuntimeError) and issubclass(NotARootFile, ValueError)
    assert issubclass(CollectionTooLarge, MemoryError) and issubclass(CollectionTooLarge, ValueError)
    from portable import ArgumentError, ArgumentTypeError, NameNotFound

    assert issubclass(ArgumentError, ValueError) and issubclass(ArgumentTypeError, TypeError)
    assert issubclass(NameNotFound, KeyError)
    from portable import OutOfMemory, Timeout

    assert issubclass(Timeout, TimeoutError) and issubclass(OutOfMemory, MemoryError)
    assert issubclass(CollectionTooLarge, OutOfMemory)  # `except pk.OutOfMemory` catches both


def test_inference_errors_keep_their_builtin_base():
    pytest.importorskip("torch", reason="inference needs torch (pip install -e '.[torch]')")
    from inference import ModelFileError, PipelineError
    from inference.remote import RemoteError, RemoteTimeout
    from inference.serving import ServeError

    assert issubclass(ModelFileError, ValueError) and issubclass(PipelineError, RuntimeError)
    assert issubclass(RemoteError, RuntimeError) and issubclass(RemoteTimeout, RemoteError)
    assert issubclass(ServeError, RuntimeError)


def test_kernel_build_error_exported():
    import portable as pk
    from backends._c_build import KernelBuildError

    assert pk.KernelBuildError is KernelBuildError


def _public_path(cls: type) -> str | None:
    """A public module (no underscore part) of the four packages that has ``cls`` under its name."""
    for name, mod in MODULES.items():
        if not any(part.startswith("_") for part in name.split(".")) and getattr(mod, cls.__name__, None) is cls:
            return f"{name}.{cls.__name__}"
    return None


def test_every_error_and_warning_is_public():
    classes = {**EXCEPTIONS, **WARNINGS}
    # a class made inside a function is caught by its public bases
    offenders = sorted(
        name
        for name, cls in classes.items()
        if _public_path(cls) is None and name not in INTERNAL and "<locals>" not in name
    )
    assert not offenders, f"not importable from a public module: {offenders}"


def test_every_module_was_checked():
    """Passes where every module of the four packages imported; else says which were not checked."""
    if MISSING:
        pytest.skip(
            "not checked (optional dependency missing): "
            + ", ".join(f"{name} ({why})" for name, why in sorted(MISSING.items()))
        )


def _errors_section() -> str:
    """docs/runtime.md's "Errors" section: the table of every error class a user can meet."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "runtime.md").read_text()
    return text.split("\n## Errors\n", 1)[1].split("\n## ", 1)[0]


def test_the_docs_table_names_every_public_error_and_warning():
    """docs/runtime.md's table says when each error is raised: a class added without a row (or a
    row left for a class that is gone) fails here."""
    import builtins
    import re

    section = _errors_section()
    classes = {**EXCEPTIONS, **WARNINGS}
    public = {cls.__name__ for name, cls in classes.items() if name not in INTERNAL and "<locals>" not in name}
    missing = sorted(n for n in public if not re.search(rf"\b{n}\b", section))
    assert not missing, f"docs/runtime.md, 'Errors', names no row for: {missing}"
    kinds = "Error|Warning|Unavailable|Mismatch|Large|Found|Filled|Timeout|Ready|File"
    named = set(re.findall(rf"`(?:[\w.]+\.)?([A-Z]\w*(?:{kinds}))`", section))
    gone = sorted(named - public - {"AlpykaError", "AlpykaWarning", "KeyboardInterrupt"} - set(dir(builtins)))
    if MISSING:
        return  # a module not imported here may define what the table names
    assert not gone, f"docs/runtime.md, 'Errors', names classes that do not exist: {gone}"
