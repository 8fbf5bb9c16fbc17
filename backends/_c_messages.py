"""``assert`` and ``print`` in the C emitter (OpenCL C, CUDA, HIP): the statements
:class:`~portable.compiler.ir.Assert` and :class:`~portable.compiler.ir.Print` for
:class:`backends._c_emit._Emitter`.

- **assert**: a false condition reports the assert's message through the kernel's error flag
  (``alpyka_err``, the one the range checks and ``range()`` steps use: a message id, the first
  report of a launch wins, raised on the host as a KernelAssertionError at the next wait) and
  returns: the kernel's thread stops; in a device function the function returns (0) and the
  thread goes on. Not CUDA's device ``assert()``, which kills the context (every later call on
  it fails): the queue stays usable.
- **print**: one ``printf`` per statement, the string constants inside the format (``%`` doubled,
  C escapes), numbers as ``%lld``/``%llu`` (OpenCL ``%ld``/``%lu``), ``%d``/``%u`` for narrower
  integers, ``%g`` for floats, ``True``/``False`` for bools. The GPU emulator's C++ compiler gets
  the C library's ``printf`` (flushed after each line, as a GPU's output reaches the host whole).
"""

from __future__ import annotations

from typing import Any

from portable.compiler import ir

#: declares printf where the CUDA/HIP text is compiled for the CPU (the GPU emulator's C++
#: compiler); NVRTC, hiprtc and HIP clang have their device printf
_PRINTF_PROLOGUE = """\
#if !defined(__CUDACC__) && !defined(__HIP__) && !defined(__HIPCC_RTC__)
#include <stdio.h>
#define alpyka_printf(...) (printf(__VA_ARGS__), fflush(stdout))
#else
#define alpyka_printf printf
#endif
"""


def c_string(text: str) -> str:
    """``text`` as the inside of a C string literal for a printf format: ``%`` doubled, quotes,
    backslashes and ``?`` (trigraphs) escaped, anything not printable ASCII as octal UTF-8 bytes."""
    out = []
    for ch in text:
        if ch == "%":
            out.append("%%")
        elif ch in '"\\?':
            out.append("\\" + ch)
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            out.extend(f"\\{b:03o}" for b in ch.encode("utf-8"))
    return "".join(out)


_BARRIERS = (*ir.BLOCK_BARRIERS, ir.WarpOp)


def barrier_functions(kernel: ir.KernelDef) -> set[str] | None:
    """The device functions of ``kernel`` that meet a barrier or warp operation (directly or
    through a call), or None when the kernel meets none at all."""
    direct = {name: any(isinstance(x, _BARRIERS) for x in ir.nodes(fn.body)) for name, fn in kernel.functions.items()}
    calls = {
        name: {x.function for x in ir.nodes(fn.body) if isinstance(x, ir.DeviceCall)}
        for name, fn in kernel.functions.items()
    }
    found = {name for name, yes in direct.items() if yes}
    grew = True
    while grew:
        more = {name for name, callees in calls.items() if callees & found} - found
        found |= more
        grew = bool(more)
    return found if meets_barrier(kernel.body, found) else None


def meets_barrier(stmt: ir.Stmt | list[ir.Stmt], functions: set[str]) -> bool:
    """Whether ``stmt`` (or a list of them) holds a barrier, a warp operation or a call of a
    function in ``functions``."""
    return any(
        isinstance(x, _BARRIERS) or (isinstance(x, ir.DeviceCall) and x.function in functions) for x in ir.nodes(stmt)
    )


class MessageEmitter:
    """``visit_Assert`` and ``visit_Print`` of the C emitter (a mixin of ``_Emitter``)."""

    def visit_Assert(self: Any, s: ir.Assert, tag: str, line: int) -> None:
        self.messages.append(s.message)  # an AssertCheck: the host raises KernelAssertionError
        report = f"(void){self.h.range_check()}(0, 0, {len(self.messages)}, alpyka_err)"  # 0 is outside [0, 0)
        self.out(f"if (!({self.expr(s.cond)})) {{ {report}; {self.bare_return()} }}{tag}", line)

    def assert_goes_on(self: Any) -> bool:
        """Whether a failed assert here lets its thread go on (see :meth:`assert_then`): kernel
        code (not a device function's) of an OpenCL kernel with a barrier or sub-group operation."""
        return self.in_function is None and self.barrier_functions is not None

    def assert_then(self: Any, s: ir.Assert, rest: list[ir.Stmt]) -> int:
        """An assert of OpenCL kernel code with barriers, and the statements after it up to the
        first that meets a barrier: ``if (!cond) { report; } else { those statements }``; how many
        of ``rest`` it emitted. OpenCL C has every work-item of a group reach each barrier, and
        PoCL's compiler relies on it even for a ``return`` never taken: a thread's early return
        inside a loop that only some threads enter dropped the statement after a passing assert.
        A failed assert still raises KernelAssertionError at the next wait; its thread skips what
        follows up to the next barrier, and reaches that barrier."""
        line = getattr(s, "line", 0) or self.cur_line
        self.cur_line = line
        tag = self.tag(getattr(s, "line", 0))
        self.messages.append(s.message)
        report = f"(void){self.h.range_check()}(0, 0, {len(self.messages)}, alpyka_err)"
        n = next((k for k, x in enumerate(rest) if meets_barrier(x, self.barrier_functions)), len(rest))
        if n == 0:
            self.out(f"if (!({self.expr(s.cond)})) {{ {report}; }}{tag}", line)
            return 0
        self.out(f"if (!({self.expr(s.cond)})) {{ {report}; }} else {{{tag}", line)
        self.block(rest[:n])
        self.out("}", line)
        return n

    def visit_Print(self: Any, s: ir.Print, tag: str, line: int) -> None:
        parts, args = [], []
        for item in s.items:
            if isinstance(item, str):
                parts.append(c_string(item))
            else:
                spec, arg = self.print_format(item)
                parts.append(spec)
                args.append(arg)
        fmt = " ".join(parts) + "\\n"
        fn = "printf" if self.d.builtin_printf else self.h.add("alpyka_printf", _PRINTF_PROLOGUE)
        self.out(f'{fn}("{fmt}"{"".join(", " + a for a in args)});{tag}', line)

    def print_format(self: Any, e: ir.Expr) -> tuple[str, str]:
        """The printf conversion of the scalar ``e`` and the argument it takes."""
        t, v = e.type, self.expr(e)
        if t.is_bool:
            return "%s", f'({v} ? "True" : "False")'
        if t.is_float:  # a float32 is promoted to double as printf's variadic argument
            return "%g", v
        if t.bits == 64:
            long, c64 = self.d.printf_int64
            ctype = ("unsigned " if t.is_unsigned else "") + c64
            return f"%{long}{'u' if t.is_unsigned else 'd'}", f"(({ctype})({v}))"
        return ("%u", f"((unsigned int)({v}))") if t.is_unsigned else ("%d", f"((int)({v}))")
