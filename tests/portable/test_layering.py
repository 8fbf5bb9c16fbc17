"""Imports run one way, function-level imports included: inside the core, and between packages.

Inside ``portable``, bottom up: errors and the registry; devices; work divisions and launches;
queues and events; the allocator; buffers; memcpy/memset; collections. A circle hides the lock
order (see portable/_deferred.py) and makes import order matter.

Between packages (CONTRIBUTING.md, "Architecture"): ``soa`` <- ``portable`` <- ``backends``; backends see the core
through its backend interface ``portable.spi`` and its public modules only; ``inference`` uses
public ``portable`` and ``soa``; nothing in ``soa``, ``portable`` or ``backends`` imports
``inference`` or torch. ``portable`` finds backends by name (its registry) and the ``alpyka``
command's subcommands through entry points, never by importing them. Neither the library nor the
demo imports the test suite's support package ``alpyka_testing``. Those import rules are
import-linter's contracts (pyproject.toml's [tool.importlinter], checked by
tests/portable/test_import_bans.py); this file keeps what no linter says: circles, the core's
layers, modules named in strings, decisions by a backend's name.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _imports(path: Path, package: str, type_only: bool = False) -> set[str]:
    """Modules of ``package`` that ``path`` imports at run time (anywhere in the file); with
    ``type_only``, the imports under ``if TYPE_CHECKING:`` too."""
    me = _module_name(path)
    here = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node) and not type_only:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.split(".")[0] == package:
                subs = [f"{mod}.{a.name}" for a in node.names]
                subs = [m for m in subs if (ROOT / Path(*m.split("."))).with_suffix(".py").exists()]
                found.update(subs)  # ``from . import x`` of a submodule x: an edge to x only
                if len(subs) < len(node.names):
                    found.add(mod)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == package:
                    found.add(alias.name)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    found.discard(me)
    return found


def _graph(package: str, recursive: bool = False, type_only: bool = False) -> dict[str, set[str]]:
    files = sorted((ROOT / package).rglob("*.py") if recursive else (ROOT / package).glob("*.py"))
    names = {_module_name(f) for f in files}
    return {_module_name(f): {m for m in _imports(f, package, type_only) if m in names} for f in files}


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m) :] + [m]
            if m not in state:
                found = dfs(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = dfs(n)
            if found:
                return found
    return None


def test_cycle_finder_sees_a_circle() -> None:
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


#: every package of this repository, and a module of each that imports others of its package
#: (the scanner must find those edges, else an empty graph would pass)
ALL_PACKAGES = {
    "portable": "portable._queue",
    "backends": "backends._host",
    "soa": "soa",
    "inference": "inference._model",
    "alpyka_testing": "alpyka_testing.warp_cases",
    "alpyka_demo": "alpyka_demo.pipeline",
}


def _with_package_inits(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """``graph`` with the imports Python makes on the way: importing ``a.b.c`` runs ``a.b``'s
    ``__init__`` first (unless the importer is inside ``a.b``, whose ``__init__`` already ran)."""
    out = {}
    for mod, deps in graph.items():
        parts = mod.split(".")
        mine = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
        inits = {".".join(dep.split(".")[:i]) for dep in deps for i in range(1, len(dep.split(".")))} - mine
        out[mod] = deps | {p for p in inits if p in graph}
    return out


def test_package_inits_run_on_the_way() -> None:
    graph = {"p": set(), "p.a": {"p.q.b"}, "p.q": {"p.a"}, "p.q.b": set()}
    assert _find_cycle(graph) is None
    assert _find_cycle(_with_package_inits(graph)) == ["p.a", "p.q", "p.a"]


@pytest.mark.parametrize("package", sorted(ALL_PACKAGES))
def test_imports_run_one_way(package: str) -> None:
    """No package's modules import each other in a circle, imports inside functions included
    (portable: the runtime core and the kernel compiler under it; inference: client, server and
    pipeline declarations, see inference/_pipeline/__init__.py), and the package ``__init__``s
    an import runs on its way. A circle hidden behind a function-level import makes import
    order matter and the layers meaningless."""
    graph = _graph(package, recursive=True)
    assert graph[ALL_PACKAGES[package]], "the import scanner found nothing: it is broken"
    cycle = _find_cycle(_with_package_inits(graph))
    assert cycle is None, f"{package}'s modules import each other in a circle: " + " -> ".join(cycle)


def test_the_backend_interface_is_in_no_circle_not_even_through_type_imports() -> None:
    """portable.spi declares the backend interface in one module (Backend, the protocols, the
    kernel handle), and the core below it never imports it; no module of portable is in an
    import circle even counting imports under ``if TYPE_CHECKING:`` (a circle of those split
    the interface across two modules once, and ran through ten modules of the core)."""
    graph = _graph("portable", recursive=True, type_only=True)
    assert "portable.compiler.ir" in graph["portable.spi"], "the scanner misses type-only imports"
    cycle = _find_cycle(graph)
    assert cycle is None, "portable's modules import each other in a circle (type-only imports included): " + (
        " -> ".join(cycle)
    )
    importers = sorted(m for m, deps in graph.items() if "portable.spi" in deps)
    assert importers == [], f"the core imports the backend interface it sits under: {importers}"


def test_layer_order() -> None:
    """Lower layers never import upper ones, not even inside a function."""
    layers = [
        ["portable._errors", "portable._registry", "portable._deferred", "portable._workers"],
        ["portable._device", "portable._errorlog"],
        ["portable._workdiv", "portable._launch", "portable._hostqueue"],
        ["portable._queue"],
        ["portable._allocator"],
        ["portable._buffer"],
        ["portable._memory", "portable.spi"],
        ["portable._collection"],
        ["portable.data._awkward", "portable.data._events"],
        ["portable.data._root", "portable.distributed._worker"],
        ["portable.distributed"],
    ]
    rank = {m: i for i, layer in enumerate(layers) for m in layer}
    graph = _graph("portable", recursive=True)
    assert set(rank) <= set(graph), f"no such modules: {set(rank) - set(graph)}"
    wrong = [
        f"{a} (layer {rank[a]}) imports {b} (layer {rank[b]})"
        for a in rank
        for b in graph[a]
        if b in rank and rank[b] > rank[a]
    ]
    assert not wrong, "\n".join(wrong)


#: the packages of the library
PACKAGES = ("soa", "portable", "backends", "inference")


def _foreign_impl_reads(path: Path) -> list[int]:
    """Lines of ``path`` that read ``x._impl`` of an object other than ``self``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return sorted(
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute)
        and n.attr == "_impl"
        and not (isinstance(n.value, ast.Name) and n.value.id == "self")
    )


def test_backends_and_inference_never_reach_behind_a_queue_or_event() -> None:
    """A queue's or event's implementation is the core's: backends ask portable.spi.queue_impl,
    inference uses the public Queue/Event methods (enqueue_native, record_external)."""
    offenders = [
        f"{_module_name(f)}:{line}"
        for package in ("backends", "inference")
        for f in sorted((ROOT / package).rglob("*.py"))
        for line in _foreign_impl_reads(f)
    ]
    assert not offenders, f"reads of another object's _impl: {offenders}"


def _names_a_test_support_module(node: ast.AST) -> bool:
    """A string that is the name of a module of alpyka_testing (``importlib.import_module(...)``,
    a pytest plugin's name, an entry point): prose that mentions the package is not one."""
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and re.fullmatch(r"alpyka_testing(\.\w+)*(:\w+)?", node.value) is not None
    )


def test_the_library_never_imports_the_test_support() -> None:
    """alpyka_testing is the test suite's support (the cupy stand-in, shared test kernels and
    models): the library and the demo never name it as a module to load (its import statements
    are refused by an import-linter contract: tests/portable/test_import_bans.py). That includes the public pytest
    plugin portable/testing/plugin.py: the stand-in is this repository's opt-in
    (tests/conftest.py), not the plugin's."""
    offenders = []
    scanned = set()
    for package in (*PACKAGES, "alpyka_demo"):
        for f in sorted((ROOT / package).rglob("*.py")):
            scanned.add(_module_name(f))
            if any(map(_names_a_test_support_module, ast.walk(ast.parse(f.read_text(), str(f))))):
                offenders.append(_module_name(f))
    assert "portable.testing.plugin" in scanned and "alpyka_demo.pipeline" in scanned, "the scan missed files"
    assert not offenders, f"the library imports the test suite's support package: {offenders}"


def test_the_test_support_scan_sees_imports_and_module_names() -> None:
    """The scan finds what it looks for: tests/conftest.py imports alpyka_testing and names its
    hang_guard plugin; a sentence about the package is not a module name."""
    conftest = ROOT / "tests" / "conftest.py"
    assert "alpyka_testing.backends.standin_torch" in _imports(conftest, "alpyka_testing")
    named = [n.value for n in ast.walk(ast.parse(conftest.read_text())) if _names_a_test_support_module(n)]
    assert named == ["alpyka_testing.hang_guard"]
    prose = ast.parse("x = 'alpyka_testing is the suite support package'")
    assert not any(map(_names_a_test_support_module, ast.walk(prose)))


# ------------------------------------------------------------ backends known by capabilities
#: alpyka's built-in backends (the tests may name them; the library outside backends/ may not)
BUILTIN_BACKEND_NAMES = ("cpu_serial", "cpu_threads", "opencl", "cuda", "rocm")

#: the files outside backends/ that may write built-in backends' names in a list or comparison
NAMES_ALLOWED = {
    "portable/_registry.py": "the registry: its fallback list of the built-ins (BUILTIN_BACKENDS)",
    "portable/env.py": "ALPYKA_EMULATE's values: the backends the GPU emulator runs",
}


def _backend_name_uses(source: str) -> list[int]:
    """Lines that decide by a built-in backend's name (DESIGN "Backends as plugins": ask the
    device's declared capabilities): a comparison with one (``backend_name == "rocm"``,
    ``name in ("cuda", "rocm")``) and a list, tuple, set or dict of two or more. ``"cuda"`` is
    also torch's device type and a memory path: compared with something that is not a backend
    (no ``backend`` in it: ``tdev.type == "cuda"``) it is allowed."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
            elts = node.keys if isinstance(node, ast.Dict) else node.elts
            names = [e.value for e in elts if isinstance(e, ast.Constant) and e.value in BUILTIN_BACKEND_NAMES]
            if len(names) >= 2:
                found.append(node.lineno)
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            consts = [
                c.value
                for side in sides
                for c in ast.walk(side)
                if isinstance(c, ast.Constant) and c.value in BUILTIN_BACKEND_NAMES
            ]
            if consts and (set(consts) != {"cuda"} or "backend" in ast.unparse(node)):
                found.append(node.lineno)
    return sorted(set(found))


def test_the_scan_sees_decisions_by_backend_name() -> None:
    decides = [
        'if dev.backend_name == "rocm": pass',
        'x = name in ("cuda", "rocm")',
        'ok = ("cpu_serial", "cpu_threads", "opencl")',
        'if device.backend_name != "cuda": pass',
        'p = {"cuda": 1, "rocm": 0}',
    ]
    assert [bool(_backend_name_uses(s)) for s in decides] == [True] * len(decides)
    allowed = [
        'if tdev.type == "cuda": pass',
        'if caps.torch_device_type == "cuda": pass',
        'pk.device("cpu_threads")',
        'DEMO = "cpu_serial"',
        'p = {"cuda": ("CUDAExecutionProvider",)}',
    ]
    assert [bool(_backend_name_uses(s)) for s in allowed] == [False] * len(allowed)


def test_only_backends_know_backends_by_name() -> None:
    """Outside backends/ (and the registry's fallback list) nothing decides by a built-in
    backend's name: a new backend is a plugin, with no edit to alpyka."""
    offenders, scanned = [], 0
    for package in ("portable", "inference", "soa", "alpyka_demo"):
        for f in sorted((ROOT / package).rglob("*.py")):
            rel = f.relative_to(ROOT).as_posix()
            scanned += 1
            if rel not in NAMES_ALLOWED:
                offenders += [f"{rel}:{line}" for line in _backend_name_uses(f.read_text())]
    assert scanned > 50, "the scan missed files"
    assert not offenders, (
        "decided by a backend's name, not by the device's capabilities "
        "(device.capabilities: kind, host_addressable, c_dialect, torch_device_type, "
        f"warp_size, emulated): {offenders}"
    )
