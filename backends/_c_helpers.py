"""Helper functions the C emitter adds to a kernel's source on demand.

The helpers an operation declares (:mod:`portable.compiler.operations`: numpy's ``//``, ``%``,
``**`` and shifts, Python's ``min``/``max``, ``abs``), range checks, OpenCL's block predicates and
sub-group votes and shuffles, and atomics without a native instruction on the target (a
compare-and-swap loop on the value's bits). Each helper is keyed by its C name; the emitter asks
for one and gets its source included once.
"""

from __future__ import annotations

from portable.compiler.operations import CHelper
from portable.compiler.types import ScalarType

from ._c_dialect import CTYPE, Dialect
from ._c_source import CEmitError


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

    def declared(self, helper: CHelper, t: ScalarType) -> str:
        """Include the helper an operation declares for type ``t``
        (:mod:`portable.compiler.operations`: numpy's integer rules, Python's ``min``/``max``); its name."""
        return self.add(*helper(t, self.d.math))

    def range_check(self) -> str:
        """``alpyka_chk(i, n, id, err)``: ``i`` when ``0 <= i < n``, else report ``id`` and give 0."""
        d = self.d
        report = d.report_error("err", "id")
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
        time when a 1D kernel's barrier region asks for ``get_local_id(1)``. Where the build has
        work-group collectives, one barrier and ``work_group_reduce_add`` of the 0/1s."""
        first = " && ".join(f"get_local_id({d}) == 0" for d in range(ndim))
        count = f"alpyka_bpred_count_{ndim}d"
        self.add(
            count,
            f"""ALPYKA_FN i64 {count}(__local volatile i32* s, bool p) {{
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
#ifdef {self.d.collectives_macro()}
    return (i64)work_group_reduce_add(p ? 1u : 0u);
#else
    if ({first}) *s = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (p) (void)atomic_inc(s);
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    return (i64)*s;
#endif
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

    def segment_lane(self) -> str:
        """``alpyka_segment_lane(k, width)``: the source lane of alpaka's ``shfl(v, k, width)``,
        lane ``k % w`` of the caller's segment of ``w`` lanes (``w``: ``width``, or the warp's
        size where that is smaller), as CUDA's ``width`` argument picks it."""
        lane, size = self.d.lane_and_warp_size()
        body = f"""    u32 size = {size}, w = (u32)width < size ? (u32)width : size;
    return (i32)(({lane} & ~(w - 1u)) | ((u32)k & (w - 1u)));"""
        body = self.d.warps_only(body, "return 0;")
        return self.add("alpyka_segment_lane", f"ALPYKA_FN i32 alpyka_segment_lane(i32 k, i32 width) {{\n{body}\n}}\n")

    def warp_match(self, op: str, t: ScalarType) -> str:
        """``alpyka_match_<any|all>_<type>(v)``: CUDA's ``__match_any_sync`` (the lanes whose ``v``
        has the caller's bits) and ``__match_all_sync`` (those lanes when they are all the warp's
        active lanes, else 0) over the lanes that take part, as uint64 masks. CUDA: its
        ``__match_any_sync``; HIP and OpenCL (no such instruction on every target): the lowest
        undecided lane broadcasts its value and the lanes holding it ballot, until none is left."""
        c = CTYPE[t.name]
        word = "u32" if t.bits == 32 else "u64"
        bits = self.d.bits_of(t, "v") if t.is_float else f"({word})v"
        name = f"alpyka_match_{op[6:]}_{c}"
        any_name = f"alpyka_match_any_{c}"
        if self.d.warps_by_helpers:
            self.warp_vote("ballot")  # includes alpyka_ballot, the sub-group's ballot
        native = self.d.native_match_any("b")
        if native is not None:
            any_body = f"    {word} b = {bits};\n    return {native[0]};"
            active = native[1]
        else:
            active, shuffle, vote = self.d.match_loop()
            any_body = f"""    {word} b = {bits};
    u64 todo = {active}, same = 0;
    while (todo != 0) {{  /* the same on every lane: built from ballots */
        {word} lead = {shuffle};
        u64 m = {vote}(b == lead);
        if (b == lead) same = m;
        todo &= ~m;
    }}
    return same;"""
            any_body = self.d.warps_only(any_body, "return (u64)1;")
        self.add(any_name, f"ALPYKA_FN u64 {any_name}({c} v) {{\n{any_body}\n}}\n")
        if op == "match_any":
            return any_name
        body = f"u64 a = {active}; return {any_name}(v) == a ? a : (u64)0;"
        return self.add(name, f"ALPYKA_FN u64 {name}({c} v) {{ {body} }}\n")

    # ------------------------------------------------------------------ atomics
    def atomic(self, op: str, t: ScalarType, kind: str, ndim: int = 1) -> str:
        """The helper ``name(ptr, operands...)`` returning the old value of atomic ``op`` (on a
        kernel of ``ndim`` dimensions: where the dialect can tell a one-work-item group apart,
        :meth:`Dialect.alone_in_block`, an atomic on its shared memory is a plain update there)."""
        if t.bits not in (32, 64) or t.is_bool:
            raise CEmitError(
                f"atomic_{op} on {t} (GPU backends have atomics on 32- and 64-bit types): use an int32, int64, "
                "uint32, uint64, float32 or float64 array"
            )
        d, c = self.d, CTYPE[t.name]
        space = d.space(kind)
        tag = "l" if space.startswith("__local") else "g"
        name = f"alpyka_atomic_{op}_{c}_{tag}"
        ptr = f"{space}{c}* p"
        alone = d.alone_in_block(ndim) if kind in ("shared", "dynamic_shared") else None
        if op == "cas":
            word, cas = d.cas_word(t.bits, space)
            plain = ""
            if alone is not None:  # compared by bits, as the compare-and-swap
                same = f"{d.bits_of(t, '*p')} == cmp"
                plain = f"    if ({alone}) {{ {c} cur = *p; if ({same}) *p = value; return cur; }}\n"
            return self.add(
                name,
                f"""ALPYKA_FN {c} {name}({ptr}, {c} compare, {c} value) {{
    {word} cmp = {d.bits_of(t, "compare")}, val = {d.bits_of(t, "value")};
{plain}    return {d.from_bits(t, cas)};
}}
""",
            )
        if t.is_float and op in ("and", "or", "xor", "inc", "dec"):
            raise CEmitError(f"atomic_{op} on {t}: bitwise, inc and dec atomics take integer arrays")
        new = _UPDATE[op].format(c=c)
        plain = ""
        if alone is not None:
            plain = f"if ({alone}) {{ {c} cur = *p; *p = {_plain_update(op, c, t)}; return cur; }} "
        native = d.native_atomic(op, t, space)
        if native is not None:
            return self.add(name, f"ALPYKA_FN {c} {name}({ptr}, {c} v) {{ {plain}return ({c}){native}; }}\n")
        if op == "sub" and t.is_integer:
            add = d.native_atomic("add", t, space)
            if add is not None:
                body = f"{plain}v = ({c})(0 - v); return ({c}){add};"
                return self.add(name, f"ALPYKA_FN {c} {name}({ptr}, {c} v) {{ {body} }}\n")
        word, cas = d.cas_word(t.bits, space)
        first = d.atomic_read(word, space)
        return self.add(
            name,
            f"""ALPYKA_FN {c} {name}({ptr}, {c} v) {{
    {plain}volatile {space}{word}* wp = (volatile {space}{word}*)p;
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


#: each atomic's new value from the current one (``cur``) and the operand (``v``), ``c`` the C
#: type: what a compare-and-swap loop stores
_UPDATE = {
    "add": "cur + v",
    "sub": "cur - v",
    "exch": "v",
    "min": "(v < cur) ? v : cur",
    "max": "(v > cur) ? v : cur",
    "and": "cur & v",
    "or": "cur | v",
    "xor": "cur ^ v",
    "inc": "(cur >= v) ? ({c})0 : ({c})(cur + 1)",
    "dec": "(cur == 0 || cur > v) ? v : ({c})(cur - 1)",
}


def _plain_update(op: str, c: str, t: ScalarType) -> str:
    """The new value a one-work-item block's plain update stores: :data:`_UPDATE`'s, an integer
    sum or difference wrapping as the atomic instruction does (no signed overflow in C)."""
    if op in ("add", "sub") and t.is_integer:
        word = "u32" if t.bits == 32 else "u64"
        return f"({c})(({word})cur {'+' if op == 'add' else '-'} ({word})v)"
    return _UPDATE[op].format(c=c)
