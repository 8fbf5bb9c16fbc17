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


class MessageEmitter:
    """``visit_Assert`` and ``visit_Print`` of the C emitter (a mixin of ``_Emitter``)."""

    def visit_Assert(self: Any, s: ir.Assert, tag: str, line: int) -> None:
        self.messages.append(s.message)  # an AssertCheck: the host raises KernelAssertionError
        report = f"(void){self.h.range_check()}(0, 0, {len(self.messages)}, alpyka_err)"  # 0 is outside [0, 0)
        self.out(f"if (!({self.expr(s.cond)})) {{ {report}; return{self.default_return()}; }}{tag}", line)

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
        fn = "printf" if self.d.is_opencl else self.h.add("alpyka_printf", _PRINTF_PROLOGUE)
        self.out(f'{fn}("{fmt}"{"".join(", " + a for a in args)});{tag}', line)

    def print_format(self: Any, e: ir.Expr) -> tuple[str, str]:
        """The printf conversion of the scalar ``e`` and the argument it takes."""
        t, v = e.type, self.expr(e)
        if t.is_bool:
            return "%s", f'({v} ? "True" : "False")'
        if t.is_float:  # a float32 is promoted to double as printf's variadic argument
            return "%g", v
        if t.bits == 64:
            long = "l" if self.d.is_opencl else "ll"  # OpenCL's long is 64 bits
            ctype = ("unsigned " if t.is_unsigned else "") + ("long" if self.d.is_opencl else "long long")
            return f"%{long}{'u' if t.is_unsigned else 'd'}", f"(({ctype})({v}))"
        return ("%u", f"((unsigned int)({v}))") if t.is_unsigned else ("%d", f"((int)({v}))")
