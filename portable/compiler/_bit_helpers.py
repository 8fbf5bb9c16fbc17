"""The source text of the bit intrinsics' helpers (``acc.popcount``, ``clz``, ``ffs``, ``brev``,
declared in :mod:`portable.compiler.operations`): the numba module's functions, which take the
value's bits zero-extended to a uint64, and OpenCL's functions where OpenCL C has no built-in.
Branch-free bit twiddling (LLVM recognises the population count and emits one instruction)."""

from __future__ import annotations

from collections.abc import Callable

from .types import ScalarType

_M1, _M2, _M4 = "0x5555555555555555", "0x3333333333333333", "0x0F0F0F0F0F0F0F0F"


def _u(k: int | str) -> str:
    return f"np.uint64({k})"


def _swap_mask(k: int, bits: int) -> int:
    """The low ``k`` bits of every ``2k``-bit group of a ``bits``-bit word."""
    return sum(((1 << k) - 1) << i for i in range(0, bits, 2 * k))


def _popcount_body(plus: str = "") -> str:
    """The lines returning the number of bits set in ``v`` (``plus`` added)."""
    return (
        f"    v = v - ((v >> {_u(1)}) & {_u(_M1)})\n"
        f"    v = (v & {_u(_M2)}) + ((v >> {_u(2)}) & {_u(_M2)})\n"
        f"    v = (v + (v >> {_u(4)})) & {_u(_M4)}\n"
        f"    return np.int32(((v * {_u('0x0101010101010101')}) >> {_u(56)}){plus})\n"
    )


#: numba helpers: ``v`` is the value's bits as a uint64 (zero-extended), ``bits`` its width (32/64)
NUMBA_BIT_HELPERS = {
    "_popcount": "def _popcount(v):\n" + _popcount_body(),
    "_ffs": (
        "def _ffs(v):\n    if v == 0:\n        return np.int32(0)\n"
        f"    v = (v & (~v + {_u(1)})) - {_u(1)}\n" + _popcount_body(f" + {_u(1)}")
    ),
    "_clz": (
        "def _clz(v, bits):\n    if v == 0:\n        return np.int32(bits)\n    n = 0\n"
        + "".join(
            f"    if v < {_u(1 << (64 - k))}:\n        n += {k}\n        v <<= {_u(k)}\n" for k in (32, 16, 8, 4, 2)
        )
        + f"    if v < {_u(1 << 63)}:\n        n += 1\n"
        + "    return np.int32(n - (64 - bits))\n"
    ),
    "_brev": (
        "def _brev(v, bits):\n"
        + "".join(
            f"    v = ((v >> {_u(k)}) & {_u(hex(m))}) | ((v & {_u(hex(m))}) << {_u(k)})\n"
            for k, m in ((k, _swap_mask(k, 64)) for k in (1, 2, 4, 8, 16, 32))
        )
        + f"    return v >> {_u('64 - bits')}\n"
    ),
}


def opencl_ffs(t: ScalarType, m: Callable[[str, ScalarType], str]) -> tuple[str, str]:
    """OpenCL C has no ``ffs``: 1 + the number of zeros below the lowest set bit, 0 for 0."""
    u = f"u{t.bits}"
    name = f"alpyka_ffs_{u}"
    return name, (
        f"ALPYKA_FN i32 {name}({u} v) {{ return v == 0 ? 0 : (i32)popcount((v & (({u})0 - v)) - ({u})1) + 1; }}\n"
    )


def opencl_brev(t: ScalarType, m: Callable[[str, ScalarType], str]) -> tuple[str, str]:
    """OpenCL C has no bit reversal: swap the halves of ever larger groups of bits."""
    u = f"u{t.bits}"
    name = f"alpyka_brev_{u}"
    masks = [(k, f"({u}){_swap_mask(k, t.bits):#x}ULL") for k in (1, 2, 4, 8, 16, 32) if k < t.bits]
    steps = "".join(f"    v = ((v >> {k}) & {m}) | ((v & {m}) << {k});\n" for k, m in masks)
    return name, f"ALPYKA_FN {u} {name}({u} v) {{\n{steps}    return v;\n}}\n"
