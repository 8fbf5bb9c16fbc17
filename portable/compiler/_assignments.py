"""Front-end, assignments: ``=``, annotated and augmented assignments to local names, tuples,
array elements and scalar fields, the kernel's ``acc.shared_array`` declarations and the
per-thread ``acc.local_array`` ones."""

from __future__ import annotations

import ast
import math
from typing import Any

from . import ir
from ._expressions import cast
from ._library import RAND_AHEAD_WORD
from ._values import AccVal, DTypeVal, FieldAccess, TupleVal, ViewVal
from .types import INDEX, ArrayType, variable_type

#: the most bytes of per-thread arrays (``acc.local_array``) a kernel and the device functions it
#: calls may declare together: they live in registers or the GPU's thread-local memory (a GPU
#: spills big ones to slow memory, and the GPU emulator gives each thread a 256 KiB stack)
LOCAL_ARRAY_BYTES = 16 * 1024


class AssignBuilder:
    """Mixin of the function builder: assignments. Needs ``error``, ``scope``, ``var`` defined by
    the builder and the expressions of :class:`~portable.compiler._expressions.ExprBuilder`."""

    def assign_name(self, name: str, v: Any, node: ast.AST) -> list[ir.Stmt]:
        held = self.scope.get(name)
        if isinstance(held, FieldAccess) and held.index:  # found = 0 on acc.shared_scalar: a shared write
            return self.store_element(held.array, held.index, v, node)
        if name in self.scope and not isinstance(v, (ir.Expr, FieldAccess)) and not _same_numbers(self.scope[name], v):
            raise self.error(node, f"{name!r} cannot be reassigned")
        if isinstance(v, FieldAccess):
            v = self.as_scalar(v, node)
        if isinstance(v, ir.Expr):
            if name in self.scope:
                raise self.error(node, self.not_a_number(name, held))
            t = v.type
            if name in self.var_types:
                new = variable_type(self.var_types[name], t)
                if new != self.var_types[name]:
                    self.var_types[name] = new
                    self.changed = True
            else:
                self.var_types[name] = t
            target = self.var(name)
            return [ir.Assign(target, cast(v, target.type), self.line(node))]
        if isinstance(v, TupleVal):  # materialise the items, keep a compile-time tuple of locals
            out, items = [], []
            for k, it in enumerate(v.items):
                if isinstance(it, TupleVal):
                    raise self.error(node, "nested tuples cannot be assigned")
                self.no_engine_alias(name, it, node)
                if not isinstance(it, (ir.Expr, FieldAccess)):  # an array, a view...: kept as it is
                    items.append(it)
                    continue
                tname = f"{name}_{k}"
                out += self.assign_name(tname, it, node)
                items.append(self.var(tname))
            self.scope[name] = TupleVal(items)
            return out
        if isinstance(v, (ir.ArrayRef, ViewVal)):
            self.no_engine_alias(name, v, node)
            if name in self.var_types:
                raise self.error(node, f"{name!r} holds a number and cannot become {self.describe(v)}")
            self.scope[name] = v
            return []
        raise self.error(node, f"cannot assign {self.describe(v)} to a variable")

    def no_engine_alias(self, name: str, v: Any, node: ast.AST) -> None:
        """KernelSyntaxError for ``name = eng`` (or a tuple holding ``eng``), ``eng`` a random engine:
        C++'s ``auto e2 = engine;`` copies the state and Python's assignment names the same one, so
        either reading would be wrong for the other's readers."""
        if isinstance(v, ir.ArrayRef) and v.name in self.ctx.engines:
            label = self.ctx.labels.get(v.name, v.name)
            raise self.error(
                node,
                f"{name!r} = {label}: an engine is not assigned to another name (C++'s auto e2 = engine "
                "copies it, Python's assignment would name the same one); draw from the engine by its own "
                "name and pass it to device functions (by reference), or make a second engine with "
                "acc.rand_engine(seed, subsequence)",
            )

    def not_a_number(self, name: str, held: Any) -> str:
        """The message for ``name = <number>`` where ``name`` holds an array or a view."""
        msg = f"{name!r} names {self.describe(held)} and cannot be assigned a number"
        if isinstance(held, ir.ArrayRef) and all(isinstance(e, ir.Const) and e.value == 1 for e in held.extents):
            zeros = ", ".join("0" for _ in held.extents)
            msg += (
                f"; write its element: {name}[{zeros}] = ... (or declare {name} = acc.shared_scalar(dtype), "
                f"a shared variable assigned by name)"
            )
        return msg

    def store(self, target: ast.AST, v: Any, node: ast.AST) -> list[ir.Stmt]:
        if isinstance(target, ast.Name):
            return self.assign_name(target.id, v, node)
        if isinstance(target, ast.Tuple):
            if not isinstance(v, TupleVal) or len(v.items) != len(target.elts):
                raise self.error(node, f"cannot unpack {self.describe(v)} into {len(target.elts)} names")
            tmp = []
            for it in v.items:  # evaluate everything before assigning (a, b = b, a)
                if isinstance(it, ir.Expr) and not isinstance(it, (ir.Const, ir.Index)):
                    self.ntmp += 1
                    tn = f"t{self.ntmp}_swap"
                    self.locals[tn] = it.type
                    tmp.append((ir.Assign(ir.Var(tn, it.type), it, self.line(node)), ir.Var(tn, it.type)))
                else:
                    tmp.append((None, it))
            out = [a for a, _ in tmp if a is not None]
            for t, (_, it) in zip(target.elts, tmp):
                out += self.store(t, it, node)
            return out
        if isinstance(target, ast.Subscript):
            arr = self.value(target.value)
            if not isinstance(arr, ir.ArrayRef):
                wrong = self.argument_misuse(target.value, "an array", ast.unparse(target))
                if wrong is not None:
                    raise wrong
                raise self.error(node, f"cannot assign to an element of {self.describe(arr)}")
            idx = tuple(self.index_list(target.slice))
            return self.store_element(arr, idx, v, node)
        if isinstance(target, ast.Attribute):
            base = self.value(target.value)
            if isinstance(base, ViewVal) and target.attr in base.fields:
                arr = base.fields[target.attr]
                if arr.type.kind != "scalar_field":
                    label = self.ctx.labels.get(arr.name)
                    raise self.error(node, f"assign elements of {label}: view.{target.attr}[i] = ...")
                return self.store_element(arr, (), v, node)
            if not isinstance(base, ViewVal):
                wrong = self.argument_misuse(target.value, "a SoA view", ast.unparse(target))
                if wrong is not None:
                    raise wrong
            raise self.error(node, f"cannot assign to attribute {target.attr!r} of {self.describe(base)}")
        raise self.error(node, f"cannot assign to {type(target).__name__}")

    def store_element(self, arr: ir.ArrayRef, idx: tuple, v: Any, node: ast.AST) -> list[ir.Stmt]:
        self.check_index_count(arr, idx, node)
        self.check_writable(arr, node)
        value = cast(self.as_scalar(v, node), arr.type.dtype)
        stores = [ir.Store(arr, idx, value, self.line(node), self.check_message(arr, idx, node))]
        if arr.name in self.ctx.engines:  # the kernel (or a device function passed it) sets its engine's words
            ahead = (ir.Const(RAND_AHEAD_WORD, INDEX),)  # drop a block computed ahead from the old words
            stores.append(ir.Store(arr, ahead, ir.Const(1, arr.type.dtype), self.line(node), None))
        return stores

    def st_Assign(self, s: ast.Assign) -> list[ir.Stmt]:
        if (
            isinstance(s.value, ast.Call)
            and isinstance(s.value.func, ast.Attribute)
            and s.value.func.attr in ("shared_array", "shared_scalar")
        ):
            return self.shared_array(s)
        if (
            isinstance(s.value, ast.Call)
            and isinstance(s.value.func, ast.Attribute)
            and s.value.func.attr == "local_array"
            and isinstance(self.value(s.value.func.value), AccVal)
        ):
            return self.local_array(s)
        if (
            isinstance(s.value, ast.Call)
            and isinstance(s.value.func, ast.Attribute)
            and s.value.func.attr == "rand_engine"
            and isinstance(self.value(s.value.func.value), AccVal)
        ):
            return self.rand_engine(s)
        out, v = self.results(self.value(s.value), s)  # a, b = f(...): the call, then the stores
        for t in s.targets:
            out += self.store(t, v, s)
        return out

    def st_AnnAssign(self, s: ast.AnnAssign) -> list[ir.Stmt]:
        if s.value is None:
            return []
        v = self.value(s.value)
        ann = self.value(s.annotation)
        if isinstance(ann, DTypeVal):
            return self.store(s.target, cast(self.as_scalar(v, s), ann.type), s)
        pre, v = self.results(v, s)
        return pre + self.store(s.target, v, s)

    def st_AugAssign(self, s: ast.AugAssign) -> list[ir.Stmt]:
        fake = ast.BinOp(left=_as_load(s.target), op=s.op, right=s.value)
        ast.copy_location(fake, s)
        v = self.value(fake)
        return self.store(s.target, v, s)

    def shared_array(self, s: ast.Assign) -> list[ir.Stmt]:
        call = s.value
        what = call.func.attr
        form = "acc.shared_array(shape, dtype)" if what == "shared_array" else "acc.shared_scalar(dtype)"
        if not self.is_kernel:
            pass_it = "the array" if what == "shared_array" else "its value, or a shared_array(1, dtype)"
            raise self.error(s, f"acc.{what}() is allowed in the kernel body only; pass {pass_it} to device functions")
        if len(s.targets) != 1 or not isinstance(s.targets[0], ast.Name):
            raise self.error(s, f"assign {form} to one name")
        if not isinstance(self.value(call.func.value), AccVal):
            raise self.error(s, f"{what} is a member of acc")
        if what == "shared_scalar":
            (dt,) = self.plain_args(call, 1, form)
            args = [ast.copy_location(ast.Constant(1), call), dt]
        else:
            args = self.plain_args(call, 2, form)
        shp = self.value(args[0])
        items = shp.items if isinstance(shp, TupleVal) else [shp]
        constant = all(isinstance(x, ir.Const) and not x.type.is_float and int(x.value) > 0 for x in items)
        if not constant or not 1 <= len(items) <= 3:
            raise self.error(s, "acc.shared_array shape must be a positive constant int or a tuple of 1-3 of them")
        dt = self.value(args[1])
        if not isinstance(dt, DTypeVal):
            raise self.error(s, f"{form}: dtype must be a numpy type such as np.float32")
        name = s.targets[0].id
        shape = tuple(int(x.value) for x in items)
        sname = "sh_" + name
        prev = self.ctx.shared.get(sname)
        if prev is not None and (prev.shape != shape or prev.dtype != dt.type):
            raise self.error(s, f"shared array {name!r} declared twice with different shapes")
        self.ctx.shared[sname] = ir.SharedArray(sname, dt.type, shape)
        label = f"shared array {name!r}" if what == "shared_array" else f"shared scalar {name!r}"
        self.ctx.labels[sname] = label
        arr = ir.ArrayRef(sname, ArrayType(dt.type, "shared", len(shape)), tuple(ir.Const(d, INDEX) for d in shape))
        zero = (ir.Const(0, INDEX),)
        self.scope[name] = arr if what == "shared_array" else FieldAccess(arr, label, zero)
        return []

    def local_array(self, s: ast.Assign) -> list[ir.Stmt]:
        """``name = acc.local_array(shape, dtype)``: a per-thread array of compile-time ``shape``,
        every element zero where the statement runs."""
        if len(s.targets) != 1 or not isinstance(s.targets[0], ast.Name):
            raise self.error(s, "assign acc.local_array(shape, dtype) to one name (m = acc.local_array(3, np.float64))")
        name = s.targets[0].id
        args = self.plain_args(s.value, 2, "acc.local_array(shape, dtype)")
        shape = self.local_shape(args[0], s)
        dt = self.value(args[1])
        if not isinstance(dt, DTypeVal):
            raise self.error(
                s,
                "acc.local_array(shape, dtype): dtype must be a numpy type such as np.float64, "
                f"got {self.describe(dt)}",
            )
        bound = self.scope.get(name)
        if name in self.var_types or (bound is not None and getattr(bound, "name", None) not in self.local_arrays):
            what = "a number" if name in self.var_types else self.describe(self.scope[name])
            raise self.error(s, f"{name!r} holds {what} and cannot become a local array; use another name")
        aname = f"{getattr(self, 'local_prefix', '')}lv_{name}"
        arr = ir.SharedArray(aname, dt.type, shape)
        prev = self.local_arrays.get(aname)
        if prev is not None and (prev.shape != shape or prev.dtype != dt.type):
            raise self.error(
                s,
                f"local array {name!r} is declared twice with different shapes or types "
                f"({prev.dtype}{list(prev.shape)} and {dt.type}{list(shape)}); use another name",
            )
        self.local_arrays[aname] = arr
        self.ctx.local_bytes[aname] = math.prod(shape) * dt.type.dtype.itemsize
        total = sum(self.ctx.local_bytes.values())
        if total > LOCAL_ARRAY_BYTES:
            raise self.error(
                s,
                f"acc.local_array{tuple(shape) if len(shape) > 1 else shape}: the per-thread arrays of this kernel "
                f"and its device functions take {total} bytes, more than the {LOCAL_ARRAY_BYTES} a thread may "
                "have (they live in registers or the GPU's thread-local memory); keep per-thread arrays small, "
                "and put big per-thread data in a buffer argument indexed by the thread's element",
            )
        self.ctx.labels[aname] = f"local array {name!r}"
        ref = ir.ArrayRef(aname, ArrayType(dt.type, "private", len(shape)), tuple(ir.Const(d, INDEX) for d in shape))
        self.scope[name] = ref
        return [ir.DeclareLocal(ref, self.line(s))]

    def local_shape(self, node: ast.AST, s: ast.AST) -> tuple[int, ...]:
        """The shape of ``acc.local_array``: a positive compile-time int or a tuple of 1-3 of them."""
        shp = self.value(node)
        items = shp.items if isinstance(shp, TupleVal) else [shp]
        fix = (
            "the shape of a per-thread array is fixed when the kernel compiles: write an int literal or a "
            "module-level int constant (or a tuple of 1-3 of them), e.g. acc.local_array((3, 3), np.float64); "
            "for a size known only at run time, declare the largest size you need and pass the count separately"
        )
        if not 1 <= len(items) <= 3:
            raise self.error(s, f"acc.local_array: {len(items)} dimensions; {fix}")
        for x in items:
            if not isinstance(x, ir.Const) or not x.type.is_integer:
                if isinstance(x, ir.Const):
                    got = f"a {x.type} number ({x.value!r})"
                else:
                    got = f"a run-time {x.type} value" if isinstance(x, ir.Expr) else self.describe(x)
                raise self.error(s, f"acc.local_array: the shape has {got}; {fix}")
            if int(x.value) <= 0:
                raise self.error(s, f"acc.local_array: extent {int(x.value)} is not positive; {fix}")
        return tuple(int(x.value) for x in items)


def _same_numbers(old: Any, new: Any) -> bool:
    """Whether ``new`` may replace the tuple ``old`` of a name: both tuples of as many numbers
    (``t = f(...)`` again: its variables ``t_0``, ``t_1``... are assigned again)."""
    return (
        isinstance(old, TupleVal)
        and isinstance(new, TupleVal)
        and len(old.items) == len(new.items)
        and all(isinstance(x, ir.Var) for x in old.items)
        and all(isinstance(x, (ir.Expr, FieldAccess)) for x in new.items)
    )


def _as_load(target: ast.AST) -> ast.AST:
    node = ast.parse(ast.unparse(target), mode="eval").body
    ast.copy_location(node, target)
    for n in ast.walk(node):
        n.lineno = target.lineno
        n.col_offset = getattr(target, "col_offset", 0)
    return node
