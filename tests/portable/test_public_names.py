"""Each public name means one thing: a public submodule of a package is not shadowed by an
attribute of the same name (``import portable.compiler as c`` gives the module), and a name that
two public modules export is the same object in both (the IR's root node is ``ir.KernelDef``, the
decorated kernel ``portable.compiler.Kernel``)."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import pytest

PACKAGES = ["portable", "soa", "inference", "backends"]


def _public_modules() -> list[ModuleType]:
    found = []
    for top in PACKAGES:
        pkg = importlib.import_module(top)
        found.append(pkg)
        for info in pkgutil.walk_packages(pkg.__path__, top + "."):
            parts = info.name.split(".")
            if any(p.startswith("_") for p in parts) or parts[-1] in ("testing", "emulator"):
                continue
            try:
                found.append(importlib.import_module(info.name))
            except ImportError:  # an optional dependency (cupy, tritonclient) that is not here
                continue
    return found


MODULES = _public_modules()


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_no_attribute_shadows_a_submodule(module: ModuleType) -> None:
    if not hasattr(module, "__path__"):
        return
    for info in pkgutil.iter_modules(module.__path__):
        if info.name.startswith("_") or not hasattr(module, info.name):
            continue
        value = getattr(module, info.name)
        assert isinstance(value, ModuleType), (
            f"{module.__name__}.{info.name} is {value!r}, which hides the submodule "
            f"{module.__name__}.{info.name}: `import {module.__name__}.{info.name} as m` gives it"
        )


def test_a_name_exported_twice_is_one_object() -> None:
    seen: dict[str, tuple[str, object]] = {}
    clashes = []
    for module in MODULES:
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            if isinstance(value, ModuleType) or not isinstance(value, type):
                continue
            if name in seen and seen[name][1] is not value:
                clashes.append(f"{name}: {seen[name][0]} and {module.__name__}")
            seen.setdefault(name, (module.__name__, value))
    assert not clashes, "classes of one name that are different classes: " + "; ".join(clashes)


def test_the_kernel_names() -> None:
    import portable as pk
    import portable.compiler as compiler
    from portable.compiler import ir

    assert isinstance(compiler, ModuleType) and callable(pk.kernel)
    assert ir.KernelDef is not compiler.Kernel and not hasattr(ir, "Kernel")


def test_the_names_inference_imports_lazily_are_listed() -> None:
    """``import inference`` loads torch only at first use of a name that needs it: those names
    are still in ``dir(inference)`` (tab completion, ``help``) and ``__all__``"""
    inference = importlib.import_module("inference")
    listed = dir(inference)
    for name in inference.__all__:
        assert name in listed, name
    assert {"Model", "ModelMetadata", "SoAMetadata"} <= set(listed)
