"""Every walk over the kernel IR (the C and numba emitters, the IR dump) handles every node kind
of portable/compiler/ir.py: a node added without teaching each of them fails here, not in a user's
kernel. The node kinds are found by introspection of ir.py, not listed by hand."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass

import pytest

from backends._c_dialect import DIALECTS
from backends._c_emit import _Emitter
from backends._c_source import CEmitError
from backends._numba_function import FunctionEmitter
from portable.compiler import _irdump, _verify, ir
from portable.compiler.types import INDEX
from portable.compiler.visit import Visitor, node_kinds, unhandled

WALKS = {
    "C emitter": _Emitter,
    "numba emitter": FunctionEmitter,
    "IR dump": _irdump._Dump,
    "IR verifier": _verify._Check,
}


def _kinds(base: type) -> list[type]:
    return [
        c
        for _, c in inspect.getmembers(ir, inspect.isclass)
        if c.__module__ == ir.__name__ and dataclasses.is_dataclass(c) and issubclass(c, base)
    ]


EXPRS, STMTS = _kinds(ir.Expr), _kinds(ir.Stmt)


def test_introspection_finds_the_node_kinds() -> None:
    names = {c.__name__ for c in EXPRS + STMTS}
    assert {"Const", "BinOp", "AtomicOp", "WarpOp", "BlockPredicate"} <= {c.__name__ for c in EXPRS}
    assert {"Assign", "StridedLoop", "Break", "MemFence", "SyncBlockThreads"} <= {c.__name__ for c in STMTS}
    assert len(names) == len(EXPRS) + len(STMTS) >= 27
    assert set(node_kinds()["expr"]) == set(EXPRS) and set(node_kinds()["stmt"]) == set(STMTS)


@pytest.mark.parametrize("walk", WALKS.values(), ids=WALKS.keys())
@pytest.mark.parametrize("node", EXPRS + STMTS, ids=lambda c: c.__name__)
def test_every_walk_handles_every_node_kind(walk: type, node: type) -> None:
    assert issubclass(walk, Visitor)
    method = getattr(walk, f"visit_{node.__name__}", None)
    assert callable(method), (
        f"{walk.visitor_name} has no visit_{node.__name__}: teach it the new node kind (see portable/compiler/visit.py)"
    )


@pytest.mark.parametrize("walk", WALKS.values(), ids=WALKS.keys())
def test_no_unhandled_kinds(walk: type) -> None:
    assert unhandled(walk) == []


@dataclass(eq=False)
class _Unknown(ir.Expr):
    type: object = INDEX


class _Partial(Visitor):
    visitor_name = "the test walk"

    def visit_Const(self, node: ir.Const) -> str:
        return f"const {node.value}"


def test_dispatch_and_the_missing_method_error() -> None:
    v = _Partial()
    assert v.visit(ir.Const(3, INDEX)) == "const 3"
    assert _Partial._methods[ir.Const] is _Partial.visit_Const  # cached per visitor class
    assert ir.Const not in Visitor._methods
    assert unhandled(_Partial, "stmt") == [c.__name__ for c in node_kinds()["stmt"]]
    with pytest.raises(NotImplementedError, match="the test walk does not handle the IR node kind Var"):
        v.visit(ir.Var("v_x", INDEX))


def test_emitters_refuse_an_unknown_node_by_name() -> None:
    k = ir.KernelDef("k", 1, [], {}, [])
    with pytest.raises(CEmitError, match="cannot express _Unknown"):
        _Emitter(k, DIALECTS["cuda"]).expr(_Unknown())
    with pytest.raises(NotImplementedError, match="the numba emitter does not handle the IR node kind _Unknown"):
        FunctionEmitter(None, 1).ex(_Unknown())  # type: ignore[arg-type]
    assert _irdump.dump(ir.Var("v_x", INDEX)) == "v_x"
