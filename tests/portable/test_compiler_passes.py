"""The compiler's passes (portable/compiler/passes.py) and the IR verifier: named passes run in
order, the IR verified after each where ALPYKA_VERIFY_IR asks (the suite's setting, so every
kernel the suite builds is verified after the front end and after each pass), and the verifier
refusing each kind of ill-formed IR: a missing cast, an untyped local, an unknown operation."""

from __future__ import annotations

import dataclasses
import typing

import numpy as np
import pytest

import portable as pk
from alpyka_testing.errors import raises_value
from portable.compiler import ir
from portable.compiler.passes import (
    CPU_PIPELINE,
    CompilerPass,
    IRVerifyError,
    PassManager,
    verify,
    verify_enabled,
)
from portable.compiler.types import BOOL, FLOAT32, INDEX, INT32, ArrayType
from portable.compiler.visit import node_kinds


def _kernel(body: list, locals_: dict | None = None, **kw) -> ir.KernelDef:
    return ir.KernelDef("k", 1, [], locals_ or {}, body, **kw)


def _problems(k: ir.KernelDef) -> str:
    with pytest.raises(IRVerifyError) as info:
        verify(k)
    return str(info.value)


def test_the_suite_verifies_every_kernel():
    """tests/conftest.py turns the verifier on for the whole suite."""
    assert verify_enabled()


def test_well_formed_ir_passes():
    x = ir.Var("v_x", INT32)
    body = [
        ir.Assign(x, ir.Cast(ir.Index("thread_idx", 0), INT32)),
        ir.If(ir.Compare("<", x, ir.Const(3, INT32)), [ir.Assign(x, ir.BinOp("+", x, ir.Const(1, INT32), INT32))], []),
    ]
    verify(_kernel(body, {"v_x": INT32}))


def test_a_missing_cast_is_refused():
    x = ir.Var("v_x", INT32)
    msg = _problems(_kernel([ir.Assign(x, ir.BinOp("+", x, ir.Index("block_idx", 0), INT32))], {"v_x": INT32}))
    assert "right operand has type int64, not int32: a Cast is missing" in msg
    msg = _problems(_kernel([ir.Assign(x, ir.Index("block_idx", 0))], {"v_x": INT32}))
    assert "value assigned to 'v_x' has type int64, not int32" in msg


def test_an_untyped_or_retyped_local_is_refused():
    x = ir.Var("v_x", INT32)
    msg = _problems(_kernel([ir.ExprStmt(ir.BinOp("+", ir.Var("v_y", INT32), x, INT32))], {"v_x": INT32}))
    assert "'v_y' is neither a parameter nor a declared local" in msg
    msg = _problems(_kernel([ir.Assign(ir.Var("v_x", FLOAT32), ir.Const(1.0, FLOAT32))], {"v_x": INT32}))
    assert "'v_x' is declared int32 but used as float32" in msg


def test_an_operation_outside_its_declared_set_is_refused():
    a, b = ir.Const(1, INT32), ir.Const(2, INT32)
    for node, want in [
        (ir.BinOp("max", a, b, INT32), "op 'max' is none of the declared"),
        (ir.MathCall("frobnicate", [a], INT32), "func 'frobnicate' is none of the declared"),
        (ir.Index("lane_idx", 0), "query 'lane_idx' is none of the declared"),
        (ir.Index("block_idx", 1), "block_idx[1] of type int64 in a 1D kernel"),
        (ir.DeviceCall("df_missing_0", [], INT32), "'df_missing_0', which is not a function of the kernel"),
    ]:
        assert want in _problems(_kernel([ir.ExprStmt(node)])), node


def test_every_operation_field_is_a_closed_set():
    """Each ``str`` field of a node kind is one of ir.OPERATION_SETS, or a name or message: a new
    operation field must declare its values."""
    free_text = {"name", "function", "check", "message"}
    for kind in node_kinds()["expr"] + node_kinds()["stmt"]:
        hints = typing.get_type_hints(kind)
        for f in dataclasses.fields(kind):
            if hints[f.name] is str and f.name not in free_text:
                assert (kind.__name__, f.name) in ir.OPERATION_SETS, f"{kind.__name__}.{f.name} has no declared set"
    assert set(ir.OPERATION_SETS[("BinOp", "op")]) == set(ir.BINARY_OPS)


def test_a_pass_that_breaks_the_ir_is_named(monkeypatch):
    """The manager runs its passes in order and verifies after each: the first to leave bad
    IR is named in the error."""
    ran = []

    class Fine(CompilerPass):
        name = "fine"

        def run(self, state):
            ran.append(self.name)

    class Breaks(CompilerPass):
        name = "breaks_casts"

        def run(self, state):
            ran.append(self.name)
            x = ir.Var("v_x", INT32)
            state.kernel = dataclasses.replace(state.kernel, body=[ir.Assign(x, ir.Const(True, BOOL))])

    monkeypatch.setenv("ALPYKA_VERIFY_IR", "1")
    pm = PassManager("test", [Fine(), Breaks()])
    assert pm.pass_names == ["fine", "breaks_casts"]
    with pytest.raises(IRVerifyError, match="after the test pipeline's pass 'breaks_casts'"):
        pm.run(_kernel([], {"v_x": INT32}))
    assert ran == ["fine", "breaks_casts"]
    monkeypatch.setenv("ALPYKA_VERIFY_IR", "0")
    ran.clear()
    pm.run(_kernel([], {"v_x": INT32}))  # not verified: no error
    assert ran == ["fine", "breaks_casts"]
    with raises_value("a name of its own.*set each pass class's name"):
        PassManager("twice", [Fine(), Fine()])


@pk.device_function
def _twice(acc, v):
    return v * 2.0


@pk.kernel
def _calls_a_device_function(acc, out, n):
    for i in acc.uniform_elements(n):
        out[i] = _twice(acc, out[i])


def test_the_cpu_pipeline_inlines_and_finds_the_flat_loop():
    out = np.zeros(4, np.float32)
    kir = _calls_a_device_function.ir(_calls_a_device_function.signature((out, 4)), 1, False)
    assert CPU_PIPELINE.pass_names == [
        "inline_device_functions",
        "fold_known_values",
        "unroll_for_local_arrays",
        "fold_unrolled_values",
        "scalarize_local_arrays",
        "fuse_group_loops",
        "find_flat_grid_loop",
    ]
    state = CPU_PIPELINE.run(kir)
    assert kir.functions and not state.kernel.functions, "inlined into a new kernel, the old one unchanged"
    assert state.flat_grid_loop is not None
    verify(state.kernel)


def test_an_array_of_the_wrong_type_is_refused():
    arr = ir.ArrayRef("a0_x", ArrayType(FLOAT32, "buffer", 1), (ir.Var("a0_x_e0", INDEX),))
    k = _kernel([ir.Store(arr, (ir.Const(0, INDEX),), ir.Const(1, INT32))])
    k.params = [ir.Param("a0_x", arr.type, "array", 0), ir.Param("a0_x_e0", INDEX, "extent", 0, "0")]
    assert "stored value has type int32, not float32" in _problems(k)


def test_the_cpu_pipeline_runs_once_for_both_host_backends(monkeypatch):
    """cpu_serial and cpu_threads emit from the same passes' result, kept with the kernel: a
    kernel launched on both runs the pipeline once per IR key (seconds for a large kernel)."""
    from portable.compiler import passes

    runs = []
    real = passes.PassManager.run
    monkeypatch.setattr(passes.PassManager, "run", lambda self, k: runs.append(k.name) or real(self, k))

    @pk.kernel
    def twice_on_the_host(acc, out, n):
        for i in acc.uniform_elements(n):
            out[i] = _twice(acc, out[i])

    for name in ("cpu_serial", "cpu_threads"):
        dev = pk.device(name)
        q = pk.Queue(dev)
        buf = pk.Buffer(dev, 4, np.float32)
        pk.memcpy(q, buf, np.ones(4, np.float32))
        pk.exec(q, pk.valid_workdiv(dev, 4), twice_on_the_host, buf, 4)
        got = np.zeros(4, np.float32)
        pk.memcpy(q, got, buf)
        q.wait()
        np.testing.assert_array_equal(got, 2.0, err_msg=name)
    assert runs == ["twice_on_the_host"], runs


def test_the_ir_after_the_cpu_pipeline_is_let_go_of_once_both_host_backends_emitted(monkeypatch):
    """The passes' result is kept with the kernel for the other host backend's plan only: once
    both emitted from it, a kernel that lives on no longer holds the IR after the passes (it did,
    for the kernel's life); a launch after that compiles nothing again."""
    import gc
    import weakref

    from portable.compiler import passes

    states = []
    real = passes.PassManager.run
    monkeypatch.setattr(passes.PassManager, "run", lambda self, k: states.append(real(self, k)) or states[-1])

    @pk.kernel
    def twice_on_the_host_kept(acc, out, n):
        for i in acc.uniform_elements(n):
            out[i] = _twice(acc, out[i])

    def launch(name: str) -> None:
        dev = pk.device(name)
        q = pk.Queue(dev)
        buf = pk.Buffer(dev, 4, np.float32)
        pk.memcpy(q, buf, np.ones(4, np.float32))
        pk.exec(q, pk.valid_workdiv(dev, 4), twice_on_the_host_kept, buf, 4)
        got = np.zeros(4, np.float32)
        pk.memcpy(q, got, buf)
        q.wait()
        np.testing.assert_array_equal(got, 2.0, err_msg=name)

    launch("cpu_serial")
    assert len(states) == 1
    post = weakref.ref(states.pop().kernel)
    gc.collect()
    assert post() is not None, "let go of before cpu_threads emitted from it"
    launch("cpu_threads")
    gc.collect()
    assert post() is None, "the kernel still holds the IR after the passes"
    for name in ("cpu_serial", "cpu_threads"):
        launch(name)
    assert states == [], "a launch after both compiled ran the passes again"


def test_field_names_are_each_ir_classs_fields():
    """ir.field_names (the passes' rebuild of a node, cached per class) is dataclasses.fields."""
    classes = [c for c in vars(ir).values() if isinstance(c, type) and dataclasses.is_dataclass(c)]
    assert len(classes) > 20
    for c in classes:
        assert ir.field_names(c) == tuple(f.name for f in dataclasses.fields(c)), c
