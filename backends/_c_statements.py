"""The statements of the C emitter (OpenCL C, CUDA, HIP): one ``visit_`` method per statement
kind of :mod:`portable.compiler.ir` for :class:`backends._c_emit._Emitter`, each appending its
C lines with the ``// file.py:line`` tag of the kernel statement.

Loops: ``range()`` is a C ``for`` over its start, stop and step evaluated once (a step known
only at run time tests its sign each trip, and a step of 0 reports a KernelValueError through
the error flag); an alpaka loop (``StridedLoop``) is one grid-stride loop when its chunk is 1
and the chunked double loop otherwise, ``break`` leaving both through a label.
"""

from __future__ import annotations

from typing import Any

from portable.compiler import ValueCheck, ir
from portable.compiler.types import ScalarType, TupleType

#: the out-pointer parameters (``alpyka_r0``, ``alpyka_r1``...) through which a device function
#: returning several values gives them: its caller passes the addresses of its own locals
OUT_POINTER = "alpyka_r"
#: the array kinds in global (device) memory
GLOBAL_KINDS = ("column", "vector", "matrix", "scalar_field", "buffer")


def ident(name: str) -> str:
    """``name`` as a C identifier (IR names are safe already; anything else becomes ``_``)."""
    return "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)


def _bare(expr: str) -> str:
    """``expr`` without one pair of parentheses around all of it (for ``if (...)`` conditions)."""
    if not (expr.startswith("(") and expr.endswith(")")):
        return expr
    depth = 0
    for i, ch in enumerate(expr):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and i < len(expr) - 1:
            return expr
    return expr[1:-1]


class StatementEmitter:
    """The statement half of the C emitter (a mixin: ``out``, ``expr``, ``fresh``, ``ctype``,
    ``element``, ``shared_access``, ``loops``... are the emitter's)."""

    # (the emitter's state these methods use)
    lines: list[tuple[str, int]]
    indent: int
    loops: list[str | None]
    used_labels: set[str]
    messages: list[Any]
    cur_line: int
    base: str
    in_function: ir.Function | None
    d: Any
    h: Any
    assert_goes_on: Any
    assert_then: Any

    def block(self, stmts: list[ir.Stmt]) -> None:
        self.indent += 1
        i = 0
        while i < len(stmts):
            s = stmts[i]
            if isinstance(s, ir.Assert) and self.assert_goes_on():  # its next statements in an else
                i += 1 + self.assert_then(s, stmts[i + 1 :])
                continue
            self.stmt(s)
            i += 1
        self.indent -= 1

    def tag(self, line: int) -> str:
        return f"  // {self.base}:{line}" if line else ""

    def stmt(self, s: ir.Stmt) -> None:
        """Emit ``s``: its ``visit_`` method gets the ``// file.py:line`` tag and the line."""
        line = getattr(s, "line", 0) or self.cur_line
        self.cur_line = line
        self.visit(s, self.tag(getattr(s, "line", 0)), line)

    def visit_Assign(self, s: ir.Assign, tag: str, line: int) -> None:
        self.out(f"{ident(s.target.name)} = {self.expr(s.value)};{tag}", line)

    def visit_Store(self, s: ir.Store, tag: str, line: int) -> None:
        v = self.expr(s.value)
        if s.array.type.dtype.is_bool:
            v = f"(u8)({v})"
        el = self.element(s.array, s.indices, getattr(s, "check", None))
        if self.checks and s.array.type.kind in ("shared", "dynamic_shared"):  # the checks see the value too
            self.out(f"ALPYKA_SH_STV({el}, {v});{tag}", line)
            return
        if self.checks and s.array.type.kind in GLOBAL_KINDS:
            self.out(f"ALPYKA_GL_STV({el}, {v});{tag}", line)
            return
        self.out(f"{self.shared_access(s.array, 'ST', el)} = {v};{tag}", line)

    def visit_ExprStmt(self, s: ir.ExprStmt, tag: str, line: int) -> None:
        self.out(f"(void){self.expr(s.value)};{tag}", line)

    def visit_CallAssign(self, s: ir.CallAssign, tag: str, line: int) -> None:
        """A function returning several values writes them through out-pointers to the targets."""
        outs = [f"&{ident(t.name)}" for t in s.targets]
        self.out(f"{self.call(s.call, outs)};{tag}", line)

    def visit_If(self, s: ir.If, tag: str, line: int) -> None:
        if isinstance(s.cond, ir.BlockCollectives):
            self.collectives_or_not(s, line)
            return
        if isinstance(s.cond, ir.SingleThreadPerBlock):  # lanes in lockstep: the orelse, at the if's depth
            self.indent -= 1
            self.block(s.orelse)
            self.indent += 1
            return
        self.out(f"if ({_bare(self.expr(s.cond))}) {{{tag}", line)
        self.block(s.body)
        if s.orelse:
            self.out("} else {", line)
            self.block(s.orelse)
        self.out("}", line)

    def collectives_or_not(self, s: ir.If, line: int) -> None:
        """``if acc.block_collectives:`` (ir.BlockCollectives): the body where the build has
        work-group collectives (the dialect's macro, where it has one) and every collective of the
        body adds integers (a float sum's order is the runtime's), the ``orelse`` otherwise; both at
        the ``if``'s own depth, so a dialect without collectives gets the ``orelse`` as it was."""
        macro = self.d.collectives_macro()
        ops = [x for x in ir.nodes(s.body) if isinstance(x, ir.BlockCollective)]
        self.indent -= 1
        if macro is not None and all(x.type.is_integer for x in ops):
            self.lines.append((f"#ifdef {macro}", line))
            self.block(s.body)
            self.lines.append(("#else", line))
            self.block(s.orelse)
            self.lines.append(("#endif", line))
        else:
            self.block(s.orelse)
        self.indent += 1

    def loop_hook(self, line: int) -> None:
        """The emulator's hook at the start of each loop iteration (its thread switches and spin
        detection, cuda_on_cpu.h's ``ALPYKA_LOOP``), when emitting for its checks."""
        if self.checks:
            self.indent += 1
            self.out("ALPYKA_LOOP();", line)
            self.indent -= 1

    def visit_While(self, s: ir.While, tag: str, line: int) -> None:
        self.out(f"{self.d.loop_hint}while ({_bare(self.expr(s.cond))}) {{{tag}", line)
        self.loop_hook(line)
        self.loops.append(None)
        self.block(s.body)
        self.loops.pop()
        self.out("}", line)

    def visit_Break(self, s: ir.Break, tag: str, line: int) -> None:
        label = self.loops[-1] if self.loops else None
        if label:
            self.used_labels.add(label)
        self.out(f"goto {label};{tag}" if label else f"break;{tag}", line)

    def visit_Continue(self, s: ir.Continue, tag: str, line: int) -> None:
        self.out(f"continue;{tag}", line)

    def visit_Return(self, s: ir.Return, tag: str, line: int) -> None:
        if isinstance(s.value, ir.Pack):  # several values: through the out-pointers, in order
            values = [self.expr(v) for v in s.value.items]
            for k, v in enumerate(values):
                self.out(f"*{OUT_POINTER}{k} = {v};{tag}", line)
            self.out(f"return;{tag}", line)
        elif s.value is not None:
            self.out(f"return {self.expr(s.value)};{tag}", line)
        else:
            self.out(f"return{self.default_return()};{tag}", line)

    def visit_DeclareLocal(self, s: ir.DeclareLocal, tag: str, line: int) -> None:
        """``acc.local_array``: the array (declared at the function's top) zeroed here; the C
        compilers drop the stores a later write makes dead."""
        n, name = self.fresh("z"), ident(s.array.name)
        size = 1
        for e in s.array.extents:
            size *= int(e.value)
        self.out(f"for (int {n} = 0; {n} < {size}; ++{n}) {name}[{n}] = 0;{tag}", line)

    def visit_SyncBlockThreads(self, s: ir.SyncBlockThreads, tag: str, line: int) -> None:
        self.out(f"{self.d.barrier()}{tag}", line)

    def visit_MemFence(self, s: ir.MemFence, tag: str, line: int) -> None:
        self.out(f"{self.d.fence(s.scope)}{tag}", line)

    def bare_return(self) -> str:
        """A return that ends the function being emitted with zero values (``return;`` in a
        kernel or a void function; a function returning several values zeroes each first)."""
        fn = self.in_function
        if fn is not None and isinstance(fn.return_type, TupleType):
            zeros = " ".join(f"*{OUT_POINTER}{k} = ({self.ctype(t)})0;" for k, t in enumerate(fn.return_type.items))
            return f"{zeros} return;"
        return f"return{self.default_return()};"

    def default_return(self) -> str:
        fn = self.in_function
        if fn is None or not isinstance(fn.return_type, ScalarType):
            return ""
        return f" ({self.ctype(fn.return_type)})0"

    def visit_ForRange(self, s: ir.ForRange, tag: str, line: int) -> None:
        n = self.fresh("r")
        t = self.ctype(s.var.type)
        step = s.step
        self.out(
            f"{{ const {t} {n}_start = {self.expr(s.start)}, {n}_stop = {self.expr(s.stop)}, "
            f"{n}_step = {self.expr(step)};{tag}",
            line,
        )
        if isinstance(step, ir.Const):
            cond = f"{n} < {n}_stop" if step.value > 0 else f"{n} > {n}_stop"
        else:
            cond = f"({n}_step > 0) ? ({n} < {n}_stop) : ({n} > {n}_stop)"
        if s.check is not None:  # a step of 0: report a KernelValueError (index 0 of an empty range) and skip
            self.messages.append(ValueCheck(s.check))
            self.out(
                f"if ({n}_step == 0) {{ (void){self.h.range_check()}(0, 0, {len(self.messages)}, alpyka_err); }} else",
                line,
            )
        self.out(f"{self.d.loop_hint}for ({t} {n} = {n}_start; {cond}; {n} += {n}_step) {{", line)
        self.loop_hook(line)
        self.indent += 1
        self.out(f"{ident(s.var.name)} = {n};", line)
        self.indent -= 1
        self.loops.append(None)
        self.block(s.body)
        self.loops.pop()
        self.out("} }", line)

    def visit_StridedLoop(self, s: ir.StridedLoop, tag: str, line: int) -> None:
        """An alpaka loop: a single grid-stride loop when the chunk is 1 (the common case, and
        far faster on PoCL), the chunked double loop otherwise; ``break`` leaves both."""
        n = self.fresh("s")
        gb = f", {n}_gb = {self.expr(s.group_base)}" if s.local_var is not None and s.group_base is not None else ""
        self.out(
            f"{{ const i64 {n}_start = {self.expr(s.start)}, {n}_stop = {self.expr(s.stop)}, "
            f"{n}_stride = {self.expr(s.stride)}, {n}_chunk = {self.expr(s.chunk)}{gb};{tag}",
            line,
        )

        def loop(head: str, it: str) -> None:
            """``for (head) {`` the loop variables bound to ``it``, the body ``}``."""
            self.out(f"{self.d.loop_hint}for ({head}) {{", line)
            self.loop_hook(line)
            self.indent += 1
            self.out(f"{ident(s.var.name)} = ({self.ctype(s.var.type)}){it};", line)
            if s.local_var is not None:
                self.out(f"{ident(s.local_var.name)} = ({self.ctype(s.local_var.type)})({it} - {n}_gb);", line)
            self.indent -= 1
            self.block(s.body)
            self.out("}", line)

        self.loops.append(f"{n}_end")
        self.out(f"if ({n}_chunk == 1) {{", line)
        self.indent += 1
        loop(f"i64 {n}_i = {n}_start; {n}_i < {n}_stop; {n}_i += {n}_stride", f"{n}_i")
        self.indent -= 1
        self.out("} else {", line)
        self.indent += 1
        head = f"i64 {n}_base = {n}_start; {n}_base < {n}_stop; {n}_base += {n}_stride"
        self.out(f"{self.d.loop_hint}for ({head}) {{", line)
        self.indent += 1
        self.out(f"const i64 {n}_lim = ({n}_base + {n}_chunk < {n}_stop) ? {n}_base + {n}_chunk : {n}_stop;", line)
        loop(f"i64 {n}_j = {n}_base; {n}_j < {n}_lim; ++{n}_j", f"{n}_j")
        self.indent -= 1
        self.out("}", line)
        self.indent -= 1
        self.out("}", line)
        self.loops.pop()
        self.out(f"{n}_end: ; }}" if f"{n}_end" in self.used_labels else "}", line)
