"""Helper functions the C emitter adds to a kernel's source on demand.

Python semantics that C lacks (floor division and modulo with negative operands, integer
``**``, ``min``/``max`` with Python's tie rule) and atomics without a native instruction on the
target (a compare-and-swap loop on the value's bits). Each helper is keyed by its C name; the
emitter asks :meth:`Helpers.need` for a name and gets the source once.
"""

from __future__ import annotations

from portable.compiler.types import ScalarType

from ._c_dialect import CTYPE, Dialect


class Helpers:
    """The helper functions one kernel needs, in the order they were first asked for."""

    def __init__(self, dialect: Dialect) -> None:
        self.d = dialect
        self._src: dict[str, str] = {}

    def source(self) -> str:
        return "\n".join(self._src.values())

    def add(self, name: str, src: str) -> str:
        """Include helper ``name`` (C source ``src``) once; its name, for the call."""
        if name not in self._src:
            self._src[name] = src
        return name

    # ------------------------------------------------------------------ arithmetic
    # numpy's fixed-width rules, which the front-end's constant folding follows too
    # (portable/compiler/_folding.py): nothing is left to C's undefined behaviour
    def floordiv(self, t: ScalarType) -> str:
        """numpy's ``//``: floats as ``np.floor_divide`` (``x // 0.0`` is ``x / 0.0``: +-inf or
        nan); integers floor, ``x // 0`` is 0 and ``MIN // -1`` wraps to ``MIN``."""
        c = CTYPE[t.name]
        name = f"alpyka_floordiv_{c}"
        if t.is_float:
            m = self._mathname
            k, cs = "F32" if t.bits == 32 else "F64", m("copysign", t)
            # x // +-0.0 is x / +-0.0 (inf of the signs' product, nan for 0 or nan), spelled
            # without the division: PoCL's compiler gave +inf for a positive x // a constant -0.0
            return self.add(
                name,
                f"""ALPYKA_FN {c} {name}({c} a, {c} b) {{
    if (b == 0) return (a == 0 || a != a) ? ALPYKA_NAN_{k} : {cs}(ALPYKA_INF_{k}, a) * {cs}(({c})1, b);
    {c} mod = {m("fmod", t)}(a, b);
    {c} div = (a - mod) / b;
    if (mod != 0) {{ if ((b < 0) != (mod < 0)) {{ div -= 1; }} }}
    if (div != 0) {{
        {c} fl = {m("floor", t)}(div);
        if (div - fl > ({c})0.5) fl += 1;
        return fl;
    }}
    return {m("copysign", t)}(({c})0, a / b);
}}
""",
            )
        if t.is_unsigned:
            return self.add(name, f"ALPYKA_FN {c} {name}({c} a, {c} b) {{ return b == 0 ? ({c})0 : a / b; }}\n")
        u = "u" + c[1:]
        return self.add(
            name,
            f"""ALPYKA_FN {c} {name}({c} a, {c} b) {{
    if (b == 0) return 0;
    if (b == -1) return ({c})(({u})0 - ({u})a);
    {c} q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
    return q;
}}
""",
        )

    def mod(self, t: ScalarType) -> str:
        """numpy's ``%``: the sign of the divisor; ``x % 0`` is 0 for integers, nan for floats."""
        c = CTYPE[t.name]
        name = f"alpyka_mod_{c}"
        if t.is_float:
            m = self._mathname
            return self.add(
                name,
                f"""ALPYKA_FN {c} {name}({c} a, {c} b) {{
    {c} r = {m("fmod", t)}(a, b);
    if (r != 0) {{ if ((b < 0) != (r < 0)) r += b; }}
    else {{ r = {m("copysign", t)}(({c})0, b); }}
    return r;
}}
""",
            )
        if t.is_unsigned:
            return self.add(name, f"ALPYKA_FN {c} {name}({c} a, {c} b) {{ return b == 0 ? ({c})0 : a % b; }}\n")
        return self.add(
            name,
            f"""ALPYKA_FN {c} {name}({c} a, {c} b) {{
    if (b == 0 || b == -1) return 0;
    {c} r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}}
""",
        )

    def ipow(self, t: ScalarType) -> str:
        """Integer ``**``, wrapping (computed unsigned); a negative exponent gives the integral
        part of the real result: 1 for base 1, +-1 for base -1, else 0."""
        c = CTYPE[t.name]
        u = c if t.is_unsigned else "u" + c[1:]
        name = f"alpyka_ipow_{c}"
        neg = (
            ""
            if t.is_unsigned
            else f"""
    if (e < 0) return base == 1 ? ({c})1 : (base == -1 ? ((e & 1) ? ({c})-1 : ({c})1) : ({c})0);"""
        )
        return self.add(
            name,
            f"""ALPYKA_FN {c} {name}({c} base, {c} e) {{{neg}
    {u} r = 1, b = ({u})base, k = ({u})e;
    while (k) {{ if (k & 1) r *= b; k >>= 1; b *= b; }}
    return ({c})r;
}}
""",
        )

    def shift(self, op: str, t: ScalarType) -> str:
        """``a << k`` / ``a >> k`` with numpy's rule for a count outside ``[0, bits)``: 0, or -1
        for ``>>`` of a negative value (C leaves such shifts undefined). The count arrives as
        an unsigned 64-bit value, so a negative one is out of range too."""
        c = CTYPE[t.name]
        u = c if t.is_unsigned else "u" + c[1:]
        kind = "shl" if op == "<<" else "shr"
        name = f"alpyka_{kind}_{c}"
        if op == "<<":
            body = f"return k < {t.bits} ? ({c})(({u})a << k) : ({c})0;"
        elif t.is_unsigned:
            body = f"return k < {t.bits} ? a >> k : ({c})0;"
        else:  # ~((~a) >> k): a negative value shifts in ones without relying on C's choice
            body = f"return k < {t.bits} ? (a < 0 ? ~((~a) >> k) : a >> k) : (a < 0 ? ({c})-1 : ({c})0);"
        return self.add(name, f"ALPYKA_FN {c} {name}({c} a, u64 k) {{ {body} }}\n")

    def minmax(self, func: str, t: ScalarType) -> str:
        """Python's ``min``/``max`` of two values: the first one wins ties (and NaN compares)."""
        c = CTYPE[t.name]
        name = f"alpyka_{func}_{c}"
        cmp = "<" if func == "min" else ">"
        return self.add(name, f"ALPYKA_FN {c} {name}({c} a, {c} b) {{ return (b {cmp} a) ? b : a; }}\n")

    def iabs(self, t: ScalarType) -> str:
        c = CTYPE[t.name]
        name = f"alpyka_abs_{c}"
        if t.is_unsigned or t.is_bool:
            body = "return a;"
        else:  # negated unsigned: abs(MIN) wraps to MIN as numpy's does (C's -MIN is undefined)
            u = "u" + c[1:]
            body = f"return a < 0 ? ({c})(({u})0 - ({u})a) : a;"
        return self.add(name, f"ALPYKA_FN {c} {name}({c} a) {{ {body} }}\n")

    def _mathname(self, func: str, t: ScalarType) -> str:
        return self.d.math(func, t)

    def range_check(self) -> str:
        """``alpyka_chk(i, n, id, err)``: ``i`` when ``0 <= i < n``, else report ``id`` and give 0."""
        d = self.d
        if d.is_opencl:
            report = "atomic_cmpxchg((volatile __global i32*)err, 0, id)"
        else:
            report = "atomicCAS((int*)err, 0, id)"
        err = f"{d.space('buffer')}i32* err"
        return self.add(
            "alpyka_chk",
            f"""ALPYKA_FN i64 alpyka_chk(i64 i, i64 n, i32 id, {err}) {{
    if (i >= 0 && i < n) return i;
    (void){report};
    return 0;
}}
""",
        )

    # ------------------------------------------------------------------ block predicates, warps
    def block_predicate(self, op: str, ndim: int) -> str:
        """OpenCL 1.2 has no ``__syncthreads_count``: ``alpyka_bpred_<op>_<ndim>d(scratch, p)``
        counts the block's true predicates in a ``__local`` int (three barriers; the first also
        keeps a thread from resetting the count while another still reads the previous one).
        The thread resetting it is tested on the launch's dimensions only: PoCL 3 crashes at run
        time when a 1D kernel's barrier region asks for ``get_local_id(1)``."""
        first = " && ".join(f"get_local_id({d}) == 0" for d in range(ndim))
        count = f"alpyka_bpred_count_{ndim}d"
        self.add(
            count,
            f"""ALPYKA_FN i64 {count}(__local volatile i32* s, bool p) {{
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    if ({first}) *s = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (p) (void)atomic_inc(s);
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    return (i64)*s;
}}
""",
        )
        if op == "count":
            return count
        name = f"alpyka_bpred_{op}_{ndim}d"
        size = " * ".join(f"get_local_size({d})" for d in range(ndim))
        test = f"== (i64)({size})" if op == "and" else "!= 0"
        return self.add(
            name, f"ALPYKA_FN bool {name}(__local volatile i32* s, bool p) {{ return {count}(s, p) {test}; }}\n"
        )

    def warp_vote(self, op: str) -> str:
        """OpenCL: ``alpyka_warp_<op>(p)`` over the sub-group where the device has sub-group
        ballots and shuffles (the build defines ALPYKA_SUBGROUPS), else over a one-thread warp."""
        if op == "size":
            return self.add(
                "alpyka_warp_size",
                """ALPYKA_FN i64 alpyka_warp_size(void) {
#ifdef ALPYKA_SUBGROUPS
    return (i64)get_max_sub_group_size();
#else
    return (i64)1;
#endif
}
""",
            )
        self.add(
            "alpyka_ballot",
            """ALPYKA_FN u64 alpyka_ballot(bool p) {
#ifdef ALPYKA_SUBGROUPS
    uint4 b = sub_group_ballot(p ? 1 : 0);
    return (u64)b.x | ((u64)b.y << 32);
#else
    return p ? (u64)1 : (u64)0;
#endif
}
""",
        )
        body = {
            "ballot": "return alpyka_ballot(p);",
            "active_mask": "return alpyka_ballot(true);",
            "all": "return alpyka_ballot(p) == alpyka_ballot(true);",
            "any": "return alpyka_ballot(p) != 0;",
        }[op]
        ret = "u64" if op in ("ballot", "active_mask") else "bool"
        arg = "void" if op == "active_mask" else "bool p"
        name = f"alpyka_warp_{op}"
        return self.add(name, f"ALPYKA_FN {ret} {name}({arg}) {{ {body} }}\n")

    def warp_shuffle(self, op: str, t: ScalarType) -> str:
        """OpenCL: ``alpyka_<op>_<type>(v, k)`` with CUDA's rule (a source lane outside the
        sub-group gives the caller's own value); the identity on one-thread warps."""
        c = CTYPE[t.name]
        name = f"alpyka_{op}_{c}"
        src = {
            "shfl": "(uint)k % get_max_sub_group_size()",
            "shfl_up": "lane - (uint)k",
            "shfl_down": "lane + (uint)k",
            "shfl_xor": "lane ^ (uint)k",
        }[op]
        call = {
            "shfl": "sub_group_shuffle(w, src)",
            "shfl_up": "sub_group_shuffle_up(w, (uint)k)",
            "shfl_down": "sub_group_shuffle_down(w, (uint)k)",
            "shfl_xor": "sub_group_shuffle_xor(w, (uint)k)",
        }[op]
        ok = {
            "shfl": "true",
            "shfl_up": "(uint)k <= lane",
            "shfl_down": "src < get_sub_group_size()",
            "shfl_xor": "src < get_sub_group_size()",
        }[op]
        wide = c if t.bits >= 32 and not t.is_bool else "i32"
        back = f"({c})r" if not t.is_bool else "r != 0"
        return self.add(
            name,
            f"""ALPYKA_FN {c} {name}({c} v, i32 k) {{
#ifdef ALPYKA_SUBGROUPS
    uint lane = get_sub_group_local_id(), src = {src};
    {wide} w = ({wide})v;
    {wide} r = {call};
    return ({ok}) ? {back} : v;
#else
    return v;
#endif
}}
""",
        )

    # ------------------------------------------------------------------ atomics
    def atomic(self, op: str, t: ScalarType, kind: str) -> str:
        """The helper ``name(ptr, operands...)`` returning the old value of atomic ``op``."""
        if t.bits not in (32, 64) or t.is_bool:
            raise NotImplementedError(f"atomic_{op} on {t} (GPU backends have atomics on 32- and 64-bit types)")
        d, c = self.d, CTYPE[t.name]
        space = d.space(kind)
        tag = "l" if space.startswith("__local") else "g"
        name = f"alpyka_atomic_{op}_{c}_{tag}"
        ptr = f"{space}{c}* p"
        if op == "cas":
            word, cas = d.cas_word(t.bits, space)
            return self.add(
                name,
                f"""ALPYKA_FN {c} {name}({ptr}, {c} compare, {c} value) {{
    {word} cmp = {d.bits_of(t, "compare")}, val = {d.bits_of(t, "value")};
    return {d.from_bits(t, cas)};
}}
""",
            )
        native = d.native_atomic(op, t, space)
        if native is not None:
            return self.add(name, f"ALPYKA_FN {c} {name}({ptr}, {c} v) {{ return ({c}){native}; }}\n")
        if op == "sub" and t.is_integer:
            add = d.native_atomic("add", t, space)
            if add is not None:
                body = f"v = ({c})(0 - v); return ({c}){add};"
                return self.add(name, f"ALPYKA_FN {c} {name}({ptr}, {c} v) {{ {body} }}\n")
        new = {
            "add": "cur + v",
            "sub": "cur - v",
            "exch": "v",
            "min": "(v < cur) ? v : cur",
            "max": "(v > cur) ? v : cur",
            "and": "cur & v",
            "or": "cur | v",
            "xor": "cur ^ v",
            "inc": f"(cur >= v) ? ({c})0 : ({c})(cur + 1)",
            "dec": f"(cur == 0 || cur > v) ? v : ({c})(cur - 1)",
        }[op]
        if t.is_float and op in ("and", "or", "xor", "inc", "dec"):
            raise NotImplementedError(f"atomic_{op} on {t}")
        word, cas = d.cas_word(t.bits, space)
        first = d.atomic_read(word, space)
        return self.add(
            name,
            f"""ALPYKA_FN {c} {name}({ptr}, {c} v) {{
    volatile {space}{word}* wp = (volatile {space}{word}*)p;
    {word} old = {first}, cmp;
    do {{
        cmp = old;
        {c} cur = {d.from_bits(t, "cmp")};
        {c} nxt = {new};
        {word} val = {d.bits_of(t, "nxt")};
        old = {cas.replace("p,", "wp,", 1).replace("*)p", "*)wp")};
    }} while (old != cmp);
    return {d.from_bits(t, "old")};
}}
""",
        )
