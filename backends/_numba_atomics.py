"""Atomic read-modify-write operations on numpy array elements for numba-compiled kernels.

``atomic_<op>(array, index_tuple, value)`` (``atomic_cas(array, index_tuple, compare, value)``)
returns the old element, like alpaka's atomics. They are LLVM ``atomicrmw`` / ``cmpxchg``
instructions (sequentially consistent), so blocks running concurrently on cpu_threads see
each other's updates.
"""

from __future__ import annotations

from llvmlite import ir as llir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import make_array

_INT_RMW = {"add": "add", "sub": "sub", "and": "and", "or": "or", "xor": "xor", "exch": "xchg"}


def _element_pointer(context, builder, aryty, ary, idx, idxty):
    arr = make_array(aryty)(context, builder, ary)
    if aryty.ndim == 0:
        return builder.bitcast(arr.data, context.get_value_type(aryty.dtype).as_pointer())
    indices = cgutils.unpack_tuple(builder, idx, count=len(idxty))
    indices = [context.cast(builder, i, t, types.intp) for i, t in zip(indices, idxty)]
    return cgutils.get_item_pointer(context, builder, aryty, arr, indices, wraparound=False)


def _int_view(builder, ptr, dtype, value=None):
    """The pointer (and value) reinterpreted as an integer of the same width (floats in cmpxchg)."""
    bits = dtype.bitwidth
    ity = llir.IntType(bits)
    iptr = builder.bitcast(ptr, ity.as_pointer())
    return iptr, ity


def _cas_loop(builder, ptr, dtype, compute):
    """``old = *ptr; do { new = compute(old) } while (!cas(ptr, old, new))``; returns old."""
    is_float = isinstance(dtype, types.Float)
    iptr, ity = _int_view(builder, ptr, dtype)
    fty = ptr.type.pointee
    entry = builder.block
    loop = builder.append_basic_block("atomic_cas_loop")
    done = builder.append_basic_block("atomic_cas_done")
    init = builder.load_atomic(iptr, "monotonic", align=dtype.bitwidth // 8)
    builder.branch(loop)
    builder.position_at_end(loop)
    phi = builder.phi(ity)
    phi.add_incoming(init, entry)
    old = builder.bitcast(phi, fty) if is_float else phi
    new = compute(old)
    new_i = builder.bitcast(new, ity) if is_float else new
    res = builder.cmpxchg(iptr, phi, new_i, "seq_cst", "seq_cst")
    got = builder.extract_value(res, 0)
    ok = builder.extract_value(res, 1)
    phi.add_incoming(got, builder.block)
    builder.cbranch(ok, done, loop)
    builder.position_at_end(done)
    return builder.bitcast(phi, fty) if is_float else phi


def _make(op: str):
    def _typed(ary, idx, vals):
        if not isinstance(ary, types.Array):
            return None
        dt = ary.dtype
        sig = dt(ary, idx, *vals)

        def codegen(context, builder, signature, args):
            aryty, idxty = signature.args[0], signature.args[1]
            ptr = _element_pointer(context, builder, aryty, args[0], args[1], idxty)
            is_float = isinstance(dt, types.Float)
            signed = not is_float and dt.signed
            operands = [context.cast(builder, v, t, dt) for v, t in zip(args[2:], signature.args[2:])]
            val = operands[-1]
            if op == "cas":
                cmp = operands[0]
                iptr, ity = _int_view(builder, ptr, dt)
                c = builder.bitcast(cmp, ity) if is_float else cmp
                v = builder.bitcast(val, ity) if is_float else val
                res = builder.cmpxchg(iptr, c, v, "seq_cst", "seq_cst")
                old = builder.extract_value(res, 0)
                return builder.bitcast(old, ptr.type.pointee) if is_float else old
            if not is_float and op in _INT_RMW:
                return builder.atomic_rmw(_INT_RMW[op], ptr, val, "seq_cst")
            if not is_float and op in ("min", "max"):
                name = ("" if signed else "u") + op
                return builder.atomic_rmw(name, ptr, val, "seq_cst")
            if is_float and op == "exch":
                iptr, ity = _int_view(builder, ptr, dt)
                old = builder.atomic_rmw("xchg", iptr, builder.bitcast(val, ity), "seq_cst")
                return builder.bitcast(old, ptr.type.pointee)

            def compute(old):
                if op == "add":
                    return builder.fadd(old, val)
                if op == "sub":
                    return builder.fsub(old, val)
                if op in ("min", "max"):
                    # NaN in memory is replaced by the value (CUDA fminf/fmaxf semantics)
                    better = builder.fcmp_unordered("<" if op == "min" else ">", val, old)
                    return builder.select(better, val, old)
                zero = llir.Constant(old.type, 0)
                one = llir.Constant(old.type, 1)
                if op == "inc":
                    ge = builder.icmp_signed(">=", old, val) if signed else builder.icmp_unsigned(">=", old, val)
                    return builder.select(ge, zero, builder.add(old, one))
                if op == "dec":
                    gt = builder.icmp_signed(">", old, val) if signed else builder.icmp_unsigned(">", old, val)
                    wrap = builder.or_(builder.icmp_unsigned("==", old, zero), gt)
                    return builder.select(wrap, val, builder.sub(old, one))
                raise NotImplementedError(op)

            return _cas_loop(builder, ptr, dt, compute)

        return sig, codegen

    if op == "cas":
        @intrinsic
        def _atomic(typingctx, ary, idx, compare, value):
            return _typed(ary, idx, (compare, value))
    else:
        @intrinsic
        def _atomic(typingctx, ary, idx, value):
            return _typed(ary, idx, (value,))
    _atomic.__name__ = f"atomic_{op}"
    return _atomic


atomic_add = _make("add")
atomic_sub = _make("sub")
atomic_min = _make("min")
atomic_max = _make("max")
atomic_exch = _make("exch")
atomic_cas = _make("cas")
atomic_and = _make("and")
atomic_or = _make("or")
atomic_xor = _make("xor")
atomic_inc = _make("inc")
atomic_dec = _make("dec")


@intrinsic
def fence(typingctx):
    """``acc.mem_fence``: a sequentially consistent LLVM fence (blocks run concurrently on cpu_threads)."""
    def codegen(context, builder, signature, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.none(), codegen
