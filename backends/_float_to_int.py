"""Float-to-integer conversion, one defined answer on every backend (``int(x)``, ``np.int32(x)``,
``math.floor(x)`` of a float, a float stored into an integer array).

C leaves the conversion of NaN or of a value outside the target's range undefined; x86 gives the
most negative value (what numba and numpy give there), CUDA's hardware saturates and gives 0 for
NaN. The kernel language defines it as saturating, as CUDA, Rust's ``as``, Java and LLVM's
``fptosi.sat`` do: the value truncated toward zero when it fits; NaN gives 0; a value above the
type's range gives its largest value (``+inf`` too), one below gives its smallest (``-inf``
too; 0 for unsigned types, so ``np.uint8(-1.0)`` is 0). A constant that does not fit is refused
at compile time instead (the front-end's folding).

Both emitters call a small helper per (float type, integer type) pair that these functions write.
"""

from __future__ import annotations

from portable.compiler.types import ScalarType

from ._c_dialect import CTYPE


def limits(dst: ScalarType) -> tuple[int, int]:
    """The smallest and largest value of the integer type ``dst``."""
    if dst.is_unsigned:
        return 0, 2**dst.bits - 1
    return -(2 ** (dst.bits - 1)), 2 ** (dst.bits - 1) - 1


def thresholds(dst: ScalarType) -> tuple[float, float]:
    """``(hi, lo)``: a float ``x >= hi`` is above ``dst``'s range, ``x <= lo`` below it. ``hi`` is
    a power of two (exact in float32 and float64); ``lo`` is ``min - 1``, which rounds to ``min``
    itself where float64 cannot hold it (int64), where ``min`` is the answer anyway."""
    lo, hi = limits(dst)
    return float(hi + 1), float(lo - 1)


def numba_helper(src: ScalarType, dst: ScalarType) -> tuple[str, str]:
    """``(name, source)`` of the numba helper converting ``src`` floats to ``dst``."""
    name = f"_f2i_{src.name}_{dst.name}"
    lo, hi = limits(dst)
    above, below = thresholds(dst)
    source = (
        f"def {name}(x):\n"
        f"    if x != x:\n        return np.{dst.name}(0)\n"
        f"    if x >= {above!r}:\n        return np.{dst.name}({hi})\n"
        f"    if x <= {below!r}:\n        return np.{dst.name}({lo})\n"
        f"    return np.{dst.name}(x)\n"
    )
    return name, source


def _c_int(value: int, dst: ScalarType) -> str:
    c = CTYPE[dst.name]
    if dst.bits == 64:
        if value == -(2**63):
            return "((i64)(-9223372036854775807LL - 1))"
        return f"(({c}){value}{'ULL' if dst.is_unsigned else 'LL'})"
    return f"(({c}){value})"


def c_helper(src: ScalarType, dst: ScalarType) -> tuple[str, str]:
    """``(name, source)`` of the C helper converting ``src`` floats to ``dst`` (the thresholds are
    written in ``src``'s own type, so float32 kernels need no double support)."""
    s, d = CTYPE[src.name], CTYPE[dst.name]
    name = f"alpyka_f2i_{s}_{d}"
    lo, hi = limits(dst)
    above, below = thresholds(dst)
    suffix = "f" if src.name == "float32" else ""
    source = (
        f"ALPYKA_FN {d} {name}({s} x) {{\n"
        f"    if (x != x) return ({d})0;\n"
        f"    if (x >= {above!r}{suffix}) return {_c_int(hi, dst)};\n"
        f"    if (x <= {below!r}{suffix}) return {_c_int(lo, dst)};\n"
        f"    return ({d})x;\n}}\n"
    )
    return name, source
