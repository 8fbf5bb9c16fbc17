"""The backend interface (portable.spi): every backend's queues and events meet its protocols,
and the public Queue/Event methods that outside code uses (enqueue_native, record_external)."""

from __future__ import annotations

import ast
import gc
import threading
import weakref
from pathlib import Path

import numpy as np
import pytest

import portable as pk
from alpyka_testing.errors import raises_type
from alpyka_testing.kernels import download
from portable import spi


def test_backend_objects_meet_the_protocols(device):
    q = pk.Queue(device)
    ev = pk.Event(device)
    assert isinstance(q._impl, spi.QueueImpl)
    assert isinstance(ev._impl, spi.EventImpl) and isinstance(ev._impl, spi.Waitable)
    assert isinstance(device.backend, spi.Backend)
    assert isinstance(device.backend.allocator(device), spi.Allocator)


def test_the_users_surface_leaves_the_backend_interface_to_spi():
    for name in ("Backend", "MemRef", "CachingAllocator"):
        assert name not in pk.__all__ and name in spi.__all__
        with pytest.warns(DeprecationWarning, match="import it from portable.spi"):
            assert getattr(pk, name) is getattr(spi, name)


def test_backends_reach_a_queues_implementation_through_spi(device):
    q = pk.Queue(device)
    assert spi.queue_impl(q) is q._impl
    assert spi.queue_impl(None) is None
    with raises_type("needs a pk.Queue, got object"):  # pk.ArgumentTypeError, a TypeError
        spi.queue_impl(object())


def test_enqueue_native_runs_in_queue_order(queue):
    order = []
    gate = threading.Event()
    keep = np.zeros(4)
    queue.enqueue_host(lambda: (gate.wait(60), order.append("host")))
    queue.enqueue_native(lambda: order.append("native"), keep)
    gate.set()
    queue.wait()
    if queue.device.backend_name in ("opencl",):  # fn enqueues on the in-order command queue at once
        assert sorted(order) == ["host", "native"]
    else:
        assert order == ["host", "native"]


def test_external_event_completes_and_fails():
    ev = pk.Event(pk.host())
    token = ev.record_external()
    assert not ev.is_complete()
    q = pk.Queue(pk.device("cpu_serial"))
    q.wait_for(ev)
    ran = []
    q.enqueue_host(lambda: ran.append(1))
    threading.Timer(0.05, ev.complete_external, (token,)).start()
    q.wait()
    assert ran == [1] and ev.is_complete()
    token = ev.record_external()
    ev.complete_external(token, ValueError("request failed"))
    with pytest.raises(pk.AsyncError, match="request failed"):
        ev.wait()


def test_record_external_needs_a_host_event():
    gpu = [d for b in pk.available_backends() for d in pk.devices(b) if not d.is_host_memory]
    if not gpu:
        pytest.skip("no device backend here")
    with pytest.raises(TypeError, match="cannot be completed by outside code"):
        pk.Event(gpu[0]).record_external()


def test_pinned_host_memory_comes_from_the_registry():
    alloc = spi.pinned_host_allocator()
    assert alloc is None or isinstance(alloc, spi.Allocator)


# ---------------------------------------------------------------- the kernel handle and plans
ROOT = Path(__file__).resolve().parents[2]
#: where backends are written: alpyka's own and the out-of-tree test plugin
BACKEND_SOURCES = [
    *sorted((ROOT / "backends").rglob("*.py")),
    *sorted((ROOT / "tests" / "plugin_backend").rglob("*.py")),
]


def _handle_members() -> set[str]:
    """What spi.KernelHandle declares: its attributes and its methods."""
    body = vars(spi.KernelHandle)
    methods = {n for n, v in body.items() if not n.startswith("_") and (callable(v) or isinstance(v, property))}
    return set(body["__annotations__"]) | methods


def _kernel_params(tree: ast.AST) -> list[tuple[ast.AST, str, str]]:
    """``(function, parameter, annotation)`` of each parameter named ``kernel`` or annotated
    with the kernel handle."""
    found = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs:
                note = ast.unparse(a.annotation) if a.annotation is not None else ""
                if a.arg == "kernel" or note.endswith("KernelHandle"):
                    found.append((fn, a.arg, note))
    return found


def test_a_kernel_is_a_kernel_handle():
    @pk.kernel
    def k(acc, out):
        pass

    assert isinstance(k, spi.KernelHandle)
    assert {"plans", "lock"}.isdisjoint(_handle_members())  # the compiled plans are the backends'
    assert not hasattr(k, "plans") and not hasattr(k, "lock")


def test_backends_use_only_what_the_kernel_handle_declares():
    """Every backend function handed a kernel types it (an IR kernel, or the handle) and reads
    only the handle's declared members off it."""
    members, wrong, handles = _handle_members(), [], 0
    for path in BACKEND_SOURCES:
        rel = path.relative_to(ROOT).as_posix()
        for fn, name, note in _kernel_params(ast.parse(path.read_text(), str(path))):
            if note in ("", "Any"):
                wrong.append(f"{rel}:{fn.lineno} {fn.name}({name}: {note or 'untyped'})")
                continue
            if not note.endswith("KernelHandle"):
                continue  # an IR kernel (ir.KernelDef) of the emitters
            handles += 1
            for node in ast.walk(fn):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == name:
                    if node.attr not in members:
                        wrong.append(f"{rel}:{node.lineno} {fn.name} reads {name}.{node.attr}")
    assert handles >= 15, f"the scan found {handles} kernel handles: it is broken"
    assert not wrong, "kernels untyped or read beyond spi.KernelHandle:\n" + "\n".join(wrong)


def test_the_plugin_backend_is_written_against_the_interface_alone():
    """tests/plugin_backend imports alpyka's public package and portable.spi, nothing else."""
    imported = set()
    for path in (ROOT / "tests" / "plugin_backend").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(a.name for a in node.names)
    alpyka = {m for m in imported if m.split(".")[0] in ("portable", "backends", "soa", "inference")}
    assert alpyka == {"portable", "portable.spi"}, alpyka


@pk.kernel
def _scale(acc, out, a, n):
    for i in acc.uniform_elements(n):
        out[i] = a * out[i]


def test_backends_keep_their_plans_in_their_own_cache(device):
    """A launch fills the plans of the device's backend (Backend.plans: the kernel's slot under
    the backend's name), and launching like it again compiles nothing more."""
    q = pk.Queue(device)
    out = pk.Buffer(device, 8, np.float32, queue=q)
    pk.memset(q, out, 0)
    wd = pk.valid_workdiv(device, 8)
    pk.exec(q, wd, _scale, out, np.float32(2), 8)
    q.wait()
    mine = device.backend.plans(_scale)
    assert isinstance(mine, spi.PlanCache) and len(mine) >= 1
    assert mine is device.backend.plans(_scale)
    before = dict(mine)
    pk.exec(q, pk.valid_workdiv(device, 8), _scale, out, np.float32(3), 8)  # another WorkDiv object
    q.wait()
    assert dict(mine) == before
    np.testing.assert_array_equal(download(q, out) if not device.is_host_memory else np.asarray(out), np.zeros(8))


def test_a_dropped_kernel_frees_the_plans_of_every_backend(device):
    """The plans live in the kernel's slots: nothing else keeps them (or the kernel) alive, and
    they hold no reference back to the kernel (dropping it frees them at once)."""

    @pk.kernel
    def doubled(acc, out, n):
        for i in acc.uniform_elements(n):
            out[i] = 2 * out[i]

    q = pk.Queue(device)
    out = pk.Buffer(device, 4, np.float32, queue=q)
    pk.memset(q, out, 0)
    backend, wd = device.backend, pk.valid_workdiv(device, 4)
    backend.launch(q, wd, doubled, (out, 4))  # the backend alone (pk.exec's queue remembers kernels)
    q.wait()
    plans = weakref.ref(backend.plans(doubled))
    assert len(plans()) == 1
    kernel = weakref.ref(doubled)
    gc.disable()  # freed at once, not by the cycle collector: no plan refers back to its kernel
    try:
        del doubled
        assert kernel() is None and plans() is None
    finally:
        gc.enable()


def test_a_plan_is_built_once_whichever_threads_ask():
    cache, made, start = spi.PlanCache(), [], threading.Barrier(8)

    def make():
        made.append(1)
        return object()

    def ask(got):
        start.wait()
        got.append(cache.build("key", make))

    got: list = []
    threads = [threading.Thread(target=ask, args=(got,)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 1 and len({id(p) for p in got}) == 1 and cache["key"] is got[0]


def test_a_kernels_slot_is_made_once_per_owner():
    assert _scale.slot("test owner", list) is _scale.slot("test owner", dict)
    assert _scale.slot("another owner", dict) == {}
