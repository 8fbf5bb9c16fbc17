"""A differential fuzzer of the kernel language: random typed expression trees over every integer and
float type, run on a backend's device and compared bit for bit with numpy (the oracle).

Each expression is a tree of column reads (two per scalar type), typed constants, Python int and
float literals, arithmetic, bitwise and shift operators, comparisons feeding ``x if c else y``,
unary ``-``/``~``, ``abs``, ``min``/``max``, casts (``np.<type>(x)``), the exactly rounded math
functions (``sqrt``, ``floor``, ``trunc``, ``copysign``, ``fmod``) and the bit intrinsics
(``acc.popcount``, ``acc.clz``, ``acc.ffs``, ``acc.brev`` of 32- and 64-bit integers). Its types are the kernel
language's (:mod:`portable.compiler.types`: numba's promotion); its values are numpy's fixed-width
rules as docs/kernels.md states them (wrapping integers, ``x // 0 == 0``, shift counts outside
``[0, 64)``, saturating float to integer conversion). Transcendentals and float ``**`` are left
out: they are within a few ulp, not the same bits, across math libraries.

``run_seed(queue, seed, count)`` generates ``count`` expressions, writes them into one kernel (a
module file: kernels need a source), runs it over inputs biased to the edges (0, +-1, the smallest
and largest values, shift counts around 64, +-0.0, inf, nan) and returns the mismatches, each
minimized (:func:`minimize`: the smallest sub-expression and one input row that still differ).
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import portable as pk
from portable.compiler.types import BOOL, FLOAT64, INT64, ScalarType, binary_result, operand_type, scalar_type
from portable.compiler.types import unify as _unify

INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
FLOATS = ("float32", "float64")
TYPES = INTS + FLOATS
COLUMNS = 2  #: columns read per type: ``a_<type>`` and ``b_<type>``
_ARITH = ("+", "-", "*", "//", "%", "/", "**")
_BITS = ("&", "|", "^", "<<", ">>")
_CMP = ("<", "<=", ">", ">=", "==", "!=")
_INTRINSICS = ("popcount", "clz", "ffs", "brev")
_WORDS = ("int32", "uint32", "int64", "uint64")  #: the types the bit intrinsics take


def T(name: str) -> ScalarType:
    return scalar_type(np.dtype(name))


# ----------------------------------------------------------------------------- the trees
@dataclass(eq=False)
class Node:
    """One node: ``kind`` is col, const, bin, un, cast, call or select; ``type`` its kernel type."""

    kind: str
    type: ScalarType
    op: str = ""
    args: list[Node] = field(default_factory=list)
    value: object = None  # col: (type name, column); const: the Python value
    text: str = ""  # const: its source text

    def has_column(self) -> bool:
        return self.kind == "col" or any(a.has_column() for a in self.args)

    def size(self) -> int:
        return 1 + sum(a.size() for a in self.args)


def col(tname: str, k: int = 0) -> Node:
    return Node("col", T(tname), value=(tname, k))


def const(value: object, tname: str | None = None) -> Node:
    """A typed constant ``np.<tname>(value)``, or a Python literal (int64/uint64 or float64)."""
    if tname is not None:
        return Node("const", T(tname), value=value, text=f"np.{tname}({_lit(value)})")
    if isinstance(value, float):
        return Node("const", FLOAT64, value=value, text=_lit(value))
    return Node("const", T("uint64") if value >= 2**63 else INT64, value=value, text=_lit(value))


def _lit(v: object) -> str:
    """``v`` as source; a negative one in parentheses (``-1 ** k`` is ``-(1 ** k)`` in Python)."""
    if isinstance(v, float):
        if math.isnan(v):
            return "math.nan"
        if math.isinf(v):
            return "math.inf" if v > 0 else "(-math.inf)"
    text = repr(v)
    return f"({text})" if text.startswith("-") else text


def binop(op: str, a: Node, b: Node) -> Node:
    return Node("bin", binary_result(op, a.type, b.type), op, [a, b])


def unop(op: str, a: Node) -> Node:
    t = INT64 if a.type.is_bool else a.type
    return Node("un", t, op, [a])


def cast(tname: str, a: Node) -> Node:
    return Node("cast", T(tname), args=[a])


def call(name: str, *args: Node) -> Node:
    if name in ("min", "max"):
        t = args[0].type if args[0].type == args[1].type else _unify(args[0].type, args[1].type)
    elif name == "abs":
        t = args[0].type
    elif name in ("floor", "trunc"):
        t = INT64
    elif name in _INTRINSICS:
        t = args[0].type if name == "brev" else T("int32")
    else:
        t = args[0].type if len(args) == 1 else _unify(args[0].type, args[1].type)
        t = t if t.is_float else FLOAT64
    return Node("call", t, name, list(args))


def select(cmp: str, a: Node, b: Node, x: Node, y: Node) -> Node:
    t = x.type if x.type == y.type else _unify(x.type, y.type)
    return Node("select", t, cmp, [a, b, x, y])


def text(n: Node) -> str:
    """The kernel source of ``n`` (columns are the locals ``a_<type>``/``b_<type>``)."""
    a = [text(x) for x in n.args]
    if n.kind == "col":
        return f"{'ab'[n.value[1]]}_{n.value[0]}"
    if n.kind == "const":
        return n.text
    if n.kind == "bin":
        return f"({a[0]} {n.op} {a[1]})"
    if n.kind == "un":
        return f"({n.op}{a[0]})"
    if n.kind == "cast":
        return f"np.{n.type.name}({a[0]})"
    if n.kind == "call":
        fn = n.op if n.op in ("min", "max", "abs") else f"acc.{n.op}" if n.op in _INTRINSICS else f"math.{n.op}"
        return f"{fn}({', '.join(a)})"
    return f"({a[2]} if {a[0]} {n.op} {a[1]} else {a[3]})"


# ----------------------------------------------------------------------------- the oracle
def _range(t: ScalarType) -> tuple[int, int]:
    if t.is_unsigned:
        return 0, 2**t.bits - 1
    return -(2 ** (t.bits - 1)), 2 ** (t.bits - 1) - 1


def convert(v: np.ndarray, t: ScalarType) -> np.ndarray:
    """``v`` converted to ``t`` as every backend converts: integers wrap, floats to integers
    truncate and saturate (NaN gives 0), the rest as numpy's astype."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if t.is_bool:
            return v != 0
        if v.dtype.kind == "f" and t.is_integer:
            lo, hi = _range(t)
            f = np.trunc(v.astype(np.float64))
            ok = ~np.isnan(f) & (f >= float(lo)) & (f < float(hi) + 1.0)
            out = np.where(ok, f, 0.0).astype(t.dtype)
            out[~np.isnan(f) & (f < float(lo))] = lo
            out[~np.isnan(f) & (f >= float(hi) + 1.0)] = hi
            return out
        return v.astype(t.dtype)


def _int_binop(op: str, a: np.ndarray, b: np.ndarray, t: ScalarType) -> np.ndarray:
    if op in ("//", "%"):  # x // 0 and x % 0 are 0; MIN // -1 wraps to MIN, x % -1 is 0
        zero = b == 0
        minus1 = np.zeros(b.shape, bool) if t.is_unsigned else b == -1
        safe = np.where(zero | minus1, np.ones_like(b), b)
        if op == "//":
            r = np.where(minus1, np.zeros_like(a) - a, a // safe)
        else:
            r = np.where(minus1, np.zeros_like(a), a % safe)
        return np.where(zero, np.zeros_like(a), r)
    if op == "**":
        out = np.power(a, np.where(b < 0, np.zeros_like(b), b))
        if not t.is_unsigned:
            neg = b < 0
            sign = np.where(b % 2 == 1, -1, 1).astype(a.dtype)
            alt = np.where(a == 1, 1, np.where(a == -1, sign, 0)).astype(a.dtype)
            out = np.where(neg, alt, out)
        return out
    return {
        "+": np.add,
        "-": np.subtract,
        "*": np.multiply,
        "&": np.bitwise_and,
        "|": np.bitwise_or,
        "^": np.bitwise_xor,
    }[op](a, b)


def _shift(op: str, a: np.ndarray, count: np.ndarray, t: ScalarType) -> np.ndarray:
    ok = (count >= 0) & (count < t.bits) if count.dtype.kind == "i" else count < t.bits
    k = np.where(ok, count, 0).astype(t.dtype)
    r = np.left_shift(a, k) if op == "<<" else np.right_shift(a, k)
    fill = np.where(a < 0, -1, 0).astype(t.dtype) if op == ">>" and not t.is_unsigned else np.zeros_like(a)
    return np.where(ok, r, fill)


def _bin(n: Node, x: np.ndarray, y: np.ndarray, ta: ScalarType, tb: ScalarType) -> np.ndarray:
    t = n.type
    if n.op in ("<<", ">>"):
        return _shift(n.op, convert(x, t), y, t)
    ot = operand_type(n.op, ta, tb)
    a, b = convert(x, ot), convert(y, ot)
    if ot.is_float:
        fn = {
            "+": np.add,
            "-": np.subtract,
            "*": np.multiply,
            "/": np.true_divide,
            "//": np.floor_divide,
            "%": np.remainder,
            "**": np.power,
        }[n.op]
        return convert(fn(a, b), t)
    if ot.is_bool:
        return convert({"&": a & b, "|": a | b, "^": a ^ b}[n.op], t)
    return convert(_int_binop(n.op, a, b, ot), t)


def _bits(v: np.ndarray, t: ScalarType) -> np.ndarray:
    """The bits of ``v`` (of the 32- or 64-bit type ``t``), most significant first: (rows, bits)."""
    big = v.astype(t.dtype.newbyteorder(">"))
    return np.unpackbits(big.view(np.uint8)).reshape(len(v), t.bits)


def _intrinsic(name: str, v: np.ndarray, t: ScalarType) -> np.ndarray:
    """numpy's bits of ``acc.<name>(v)``: population count, leading zeros (the width for 0), 1 + the
    lowest set bit's position (0 for 0), or the bits reversed."""
    b = _bits(v, t)
    if name == "brev":
        return np.packbits(b[:, ::-1], axis=1).reshape(-1).view(t.dtype.newbyteorder(">")).astype(t.dtype)
    nonzero = b.any(axis=1)
    out = {
        "popcount": b.sum(axis=1),
        "clz": np.where(nonzero, b.argmax(axis=1), t.bits),
        "ffs": np.where(nonzero, b[:, ::-1].argmax(axis=1) + 1, 0),
    }[name]
    return out.astype(np.int32)


def _call(n: Node, vals: list[np.ndarray], types: list[ScalarType]) -> np.ndarray:
    t = n.type
    if n.op in _INTRINSICS:
        return _intrinsic(n.op, vals[0], types[0])
    if n.op in ("min", "max"):
        a, b = convert(vals[0], t), convert(vals[1], t)
        return np.where(b < a, b, a) if n.op == "min" else np.where(b > a, b, a)
    if n.op == "abs":
        return np.abs(vals[0]).astype(t.dtype)
    if n.op in ("floor", "trunc"):
        if not types[0].is_float:
            return convert(vals[0], INT64)
        return convert(getattr(np, n.op)(vals[0]), INT64)
    args = [convert(v, t) for v in vals]
    return {"sqrt": np.sqrt, "copysign": np.copysign, "fmod": np.fmod}[n.op](*args).astype(t.dtype)


def evaluate(n: Node, cols: dict[tuple[str, int], np.ndarray]) -> np.ndarray:
    """The value of ``n`` for every row of ``cols`` (``(type name, column) -> values``), numpy's."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = len(next(iter(cols.values())))
        if n.kind == "col":
            return cols[n.value]
        if n.kind == "const":
            if n.type.is_float:
                return np.full(rows, n.value, n.type.dtype)
            return np.full(rows, int(n.value) % 2**64, np.uint64).astype(n.type.dtype)
        vals = [evaluate(a, cols) for a in n.args]
        types = [a.type for a in n.args]
        if n.kind == "bin":
            return _bin(n, vals[0], vals[1], *types)
        if n.kind == "un":
            v = convert(vals[0], n.type)
            return np.negative(v) if n.op == "-" else np.invert(v)
        if n.kind == "cast":
            return convert(vals[0], n.type)
        if n.kind == "call":
            return _call(n, vals, types)
        ct = operand_type(n.op, types[0], types[1])
        c = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal}.get(
            n.op, np.not_equal
        )(convert(vals[0], ct), convert(vals[1], ct))
        return np.where(c, convert(vals[2], n.type), convert(vals[3], n.type))


# ----------------------------------------------------------------------------- generation
def _int_values(t: ScalarType, rng: np.random.Generator, n: int) -> np.ndarray:
    lo, hi = _range(t)
    special = [0, 1, -1, 2, -2, 3, 7, -7, lo, lo + 1, hi, hi - 1, 31, 32, 63, 64, 65, 2 ** (t.bits - 2), 127, -128]
    special = [v for v in special if lo <= v <= hi]
    kind = rng.integers(0, 4, n)
    picks = np.array(special, dtype=object)[rng.integers(0, len(special), n)]
    small = rng.integers(max(lo, -100), min(hi, 100) + 1, n)
    full = rng.integers(lo, hi, n, endpoint=True, dtype=t.dtype)
    out = [int(p) if k < 2 else int(s) if k == 2 else int(f) for k, p, s, f in zip(kind, picks, small, full)]
    return np.array([v % 2**t.bits for v in out], dtype=np.uint64).astype(t.dtype)


def _float_values(t: ScalarType, rng: np.random.Generator, n: int) -> np.ndarray:
    tiny = 1e-40 if t.bits == 32 else 1e-310
    big = 3e38 if t.bits == 32 else 1e300
    special = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 7.0, math.inf, -math.inf, math.nan, tiny, -big, big]
    special += [2.0**63, -(2.0**63), 2.0**64, 1e19, 255.5, -128.5, 65536.0]
    kind = rng.integers(0, 3, n)
    picks = np.array(special)[rng.integers(0, len(special), n)]
    normal = rng.normal(0, 1000, n)
    return np.where(kind < 2, picks, normal).astype(t.dtype)


def inputs(rng: np.random.Generator, rows: int) -> dict[str, np.ndarray]:
    """Per type, a ``(rows, COLUMNS)`` array of edge-biased values."""
    out = {}
    for name in TYPES:
        t = T(name)
        make = _float_values if t.is_float else _int_values
        out[name] = np.stack([make(t, rng, rows) for _ in range(COLUMNS)], axis=1)
    return out


class Generator:
    """Random trees of depth at most ``depth``; every operation has a column below it (a tree of
    constants only is folded by the front end, where a constant that does not fit is an error)."""

    def __init__(self, rng: np.random.Generator, depth: int = 4) -> None:
        self.rng = rng
        self.depth = depth

    def pick(self, seq):
        return seq[int(self.rng.integers(0, len(seq)))]

    def leaf(self, column: bool) -> Node:
        tname = self.pick(TYPES)
        if column or self.rng.random() < 0.6:
            return col(tname, int(self.rng.integers(0, COLUMNS)))
        t = T(tname)
        if self.rng.random() < 0.3:  # a Python literal
            return const(self.pick([0, 1, 2, 3, 7, 31, 63, 64, -1, 2**63, 2**64 - 1, -(2**63), 0.0, -0.0, 0.5, 1e300]))
        if t.is_float:
            return const(self.pick([0.0, -0.0, 1.0, -1.5, 2.0, 0.1, math.inf, math.nan]), tname)
        lo, hi = _range(t)
        return const(int(self.pick([v for v in (0, 1, 2, 3, 5, 8, 64, -1, lo, hi) if lo <= v <= hi])), tname)

    def tree(self, depth: int | None = None) -> Node:
        depth = self.depth if depth is None else depth
        if depth == 0 or self.rng.random() < 0.15:
            return self.leaf(column=depth == self.depth)
        r = self.rng.random()
        if r < 0.55:
            return self.binary(depth)
        if r < 0.65:
            return unop(self.pick(["-", "-", "~"]), self.integer(self.tree(depth - 1)))
        if r < 0.78:
            return cast(self.pick(TYPES), self.with_column(self.tree(depth - 1)))
        if r < 0.9:
            return self.function(depth)
        a, b = self.tree(depth - 1), self.with_column(self.tree(depth - 1))
        return select(self.pick(_CMP), a, b, self.tree(depth - 1), self.tree(depth - 1))

    def with_column(self, n: Node) -> Node:
        return n if n.has_column() else binop("+", n, self.leaf(column=True)) if not n.type.is_bool else n

    def integer(self, n: Node) -> Node:
        n = self.with_column(n)
        return n if n.type.is_integer else cast(self.pick(INTS), n)

    def binary(self, depth: int) -> Node:
        op = self.pick(_ARITH + _BITS)
        a, b = self.tree(depth - 1), self.tree(depth - 1)
        if not (a.has_column() or b.has_column()):
            b = self.leaf(column=True)
        if op in _BITS:
            a, b = self.integer(a), self.integer(b)
        if op == "**" and (a.type.is_float or b.type.is_float):
            op = "*"  # float pow: libm's, not correctly rounded
        return binop(op, a, b)

    def function(self, depth: int) -> Node:
        name = self.pick(["min", "max", "abs", "floor", "trunc", "sqrt", "copysign", "fmod", *_INTRINSICS])
        a = self.with_column(self.tree(depth - 1))
        if name in _INTRINSICS:
            return call(name, a if a.type.name in _WORDS else cast(self.pick(_WORDS), a))
        if name == "copysign":  # a sign from a column: the sign bit of a computed NaN is no rule
            return call(name, a, self.leaf(column=True))
        if name in ("min", "max", "fmod"):
            return call(name, a, self.tree(depth - 1))
        if name in ("floor", "trunc", "sqrt") and not a.type.is_float:
            a = cast(self.pick(FLOATS), a)
        return call(name, a)


# ----------------------------------------------------------------------------- running
_DIR = Path(tempfile.mkdtemp(prefix="alpyka_fuzz_"))


def build_kernel(exprs: list[Node]):
    """A kernel computing ``exprs`` per row; its outputs one ``(rows, k)`` array per result type."""
    by_type: dict[str, list[int]] = {}
    for j, e in enumerate(exprs):
        by_type.setdefault(e.type.name, []).append(j)
    outs = sorted(by_type)
    lines = ["import math", "", "import numpy as np", "", "import portable as pk", "", "", "@pk.kernel"]
    params = ", ".join([f"x_{t}" for t in TYPES] + [f"o_{t}" for t in outs])
    lines.append(f"def fuzz(acc, n, {params}):")
    lines.append("    for i in acc.uniform_elements(n):")
    for t in TYPES:
        for k in range(COLUMNS):
            lines.append(f"        {'ab'[k]}_{t} = x_{t}[i, {k}]")
    for t in outs:
        for slot, j in enumerate(by_type[t]):
            lines.append(f"        o_{t}[i, {slot}] = {text(exprs[j])}")
    source = "\n".join(lines) + "\n"
    # named by its content: the same expressions on another backend of this process (cpu_threads
    # after cpu_serial) give the same generated code, whose compiled module is then reused
    path = _DIR / f"alpyka_fuzz_{hashlib.sha256(source.encode()).hexdigest()[:20]}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.fuzz, outs, by_type, path


def run(queue: pk.Queue, exprs: list[Node], data: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Each expression's values on ``queue``'s device, one row per input row."""
    kernel, outs, by_type, _ = build_kernel(exprs)
    dev = queue.device
    rows = len(data[TYPES[0]])
    bufs = []
    for t in TYPES:
        b = pk.Buffer(dev, data[t].shape, data[t].dtype)
        pk.memcpy(queue, b, np.ascontiguousarray(data[t]))
        bufs.append(b)
    obufs = [pk.Buffer(dev, (rows, len(by_type[t])), np.dtype(t)) for t in outs]
    pk.exec(queue, pk.make_workdiv(dev, 2, 32), kernel, rows, *bufs, *obufs)
    got: list[np.ndarray] = [np.empty(0)] * len(exprs)
    for t, b in zip(outs, obufs):
        host = np.empty(b.shape, b.dtype)
        pk.memcpy(queue, host, b)
        queue.wait()
        for slot, j in enumerate(by_type[t]):
            got[j] = host[:, slot]
    return got


def _columns(data: dict[str, np.ndarray]) -> dict[tuple[str, int], np.ndarray]:
    return {(t, k): data[t][:, k] for t in TYPES for k in range(COLUMNS)}


def differ(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Rows whose bits differ (any NaN equals any NaN)."""
    if want.dtype.kind == "f":
        nan = np.isnan(want) & np.isnan(got)
        bits = {4: np.uint32, 8: np.uint64}[want.dtype.itemsize]
        return ~nan & (got.view(bits) != want.view(bits))
    return got != want


@dataclass
class Mismatch:
    """One expression whose value differs from numpy's at one input row (minimized)."""

    expr: str
    row: dict[str, object]
    got: object
    want: object

    def __str__(self) -> str:
        used = ", ".join(f"{k}={v!r}" for k, v in self.row.items())
        return f"{self.expr}  with {used}: got {self.got!r}, numpy {self.want!r}"


def _row(data: dict[str, np.ndarray], r: int) -> dict[str, np.ndarray]:
    return {t: data[t][r : r + 1] for t in TYPES}


def _subtrees(n: Node) -> list[Node]:
    out = [n]
    for a in n.args:
        out += _subtrees(a)
    return out


def minimize(queue: pk.Queue, e: Node, data: dict[str, np.ndarray], r: int) -> Mismatch:
    """The smallest sub-expression of ``e`` that still differs from numpy at row ``r`` (all the
    candidates of a round run in one kernel)."""
    one = _row(data, r)
    cols = _columns(one)
    best = e
    while True:
        cands = sorted((s for s in _subtrees(best) if s is not best and s.has_column()), key=Node.size)
        if not cands:
            break
        got = run(queue, cands, one)
        smaller = next((c for c, g in zip(cands, got) if differ(g, evaluate(c, cols)).any()), None)
        if smaller is None:
            break
        best = smaller
    (g,) = run(queue, [best], one)
    used = sorted({s.value for s in _subtrees(best) if s.kind == "col"})
    row = {f"{'ab'[k]}_{t}": one[t][0, k].item() for t, k in used}
    return Mismatch(text(best), row, g[0].item(), evaluate(best, cols)[0].item())


def run_seed(queue: pk.Queue, seed: int, count: int = 60, rows: int = 64, depth: int = 4) -> list[Mismatch]:
    """``count`` random expressions of seed ``seed`` on ``queue``'s device over ``rows`` input
    rows; the mismatches with numpy, each minimized (at most one per expression)."""
    rng = np.random.default_rng(seed)
    gen = Generator(rng, depth)
    exprs = [gen.with_column(gen.tree()) for _ in range(count)]
    exprs = [e if not e.type.is_bool else cast("int64", e) for e in exprs]
    data = inputs(rng, rows)
    cols = _columns(data)
    got = run(queue, exprs, data)
    found = []
    for e, g in zip(exprs, got):
        bad = np.nonzero(differ(g, evaluate(e, cols)))[0]
        if bad.size:
            found.append(minimize(queue, e, data, int(bad[0])))
    return found


__all__ = ["Generator", "Mismatch", "Node", "binop", "call", "cast", "col", "const", "evaluate", "inputs"]
__all__ += ["minimize", "run", "run_seed", "select", "text", "unop", "BOOL"]
