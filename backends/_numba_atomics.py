"""Atomic read-modify-write operations on numpy array elements for numba-compiled kernels, and
their plain twins.

``atomic_<op>(array, index_tuple, value)`` (``atomic_cas(array, index_tuple, compare, value)``)
returns the old element, like alpaka's atomics. They are LLVM ``atomicrmw`` / ``cmpxchg``
instructions with relaxed (``monotonic``) ordering, as CUDA's and alpaka's atomics on a GPU:
blocks running concurrently on cpu_threads (and kernels of two queues) see each other's updates,
and ordering other memory accesses is ``acc.mem_fence``'s work (:func:`fence`, sequentially
consistent). ``plain_<op>`` does the same read-modify-write with an ordinary load and store,
for the atomics that nothing can contend on the CPU backends (a block has one thread): see
:func:`numba_atomic` for which those are.
"""

from __future__ import annotations

from llvmlite import ir as llir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import make_array

from portable.compiler.types import ArrayType

_INT_RMW = {"add": "add", "sub": "sub", "and": "and", "or": "or", "xor": "xor", "exch": "xchg"}
_ORDER = "monotonic"  #: relaxed, as alpaka's atomics on a GPU; fences stay explicit
_OPS = ("add", "sub", "min", "max", "exch", "cas", "and", "or", "xor", "inc", "dec")
#: array kinds only one block's (one thread's) code reaches: shared, dynamic shared, private
_ONE_BLOCKS = frozenset({"shared", "dynamic_shared", "private"})


def numba_atomic(op: str, array: ArrayType, hierarchy: str, serial: bool) -> str:
    """The name of the function that performs atomic ``op`` on ``array`` (an IR array's type) with
    ``hierarchy`` on a CPU backend (``serial``: cpu_serial; else cpu_threads).

    As alpaka's CPU accelerators (``AtomicNoOp`` where a block has one thread): a plain
    read-modify-write for shared, dynamic shared and private arrays (one block's, and the block
    has one thread), for ``hierarchy="threads"`` (the threads of one block) and, on cpu_serial,
    for ``hierarchy="block"`` (the blocks of one grid, which run one after another there); a
    relaxed atomic otherwise (blocks of cpu_threads run concurrently; kernels on two queues may
    share a buffer).
    """
    if array.kind in _ONE_BLOCKS or hierarchy == "threads" or (hierarchy == "block" and serial):
        return f"plain_{op}"
    return f"atomic_{op}"


def _element_pointer(context, builder, aryty, ary, idx, idxty):
    arr = make_array(aryty)(context, builder, ary)
    if aryty.ndim == 0:
        return builder.bitcast(arr.data, context.get_value_type(aryty.dtype).as_pointer())
    indices = cgutils.unpack_tuple(builder, idx, count=len(idxty))
    indices = [context.cast(builder, i, t, types.intp) for i, t in zip(indices, idxty)]
    return cgutils.get_item_pointer(context, builder, aryty, arr, indices, wraparound=False)


def _int_view(builder, ptr, dtype):
    """The pointer reinterpreted as a pointer to an integer of the same width (floats in cmpxchg)."""
    ity = llir.IntType(dtype.bitwidth)
    return builder.bitcast(ptr, ity.as_pointer()), ity


def _new_value(builder, op, old, operands, dt):
    """The value ``op`` stores over ``old`` (``operands``: ``(value,)`` or ``(compare, value)``)."""
    is_float = isinstance(dt, types.Float)
    signed = not is_float and dt.signed
    val = operands[-1]
    if op == "exch":
        return val
    if op == "cas":
        if is_float:  # compares bits, as cmpxchg does
            ity = llir.IntType(dt.bitwidth)
            same = builder.icmp_unsigned("==", builder.bitcast(old, ity), builder.bitcast(operands[0], ity))
        else:
            same = builder.icmp_unsigned("==", old, operands[0])
        return builder.select(same, val, old)
    if op == "add":
        return builder.fadd(old, val) if is_float else builder.add(old, val)
    if op == "sub":
        return builder.fsub(old, val) if is_float else builder.sub(old, val)
    if op in ("and", "or", "xor"):
        return {"and": builder.and_, "or": builder.or_, "xor": builder.xor}[op](old, val)
    if op in ("min", "max"):
        if is_float:  # NaN in memory is replaced by the value (CUDA fminf/fmaxf semantics)
            better = builder.fcmp_unordered("<" if op == "min" else ">", val, old)
        else:
            cmp = builder.icmp_signed if signed else builder.icmp_unsigned
            better = cmp("<" if op == "min" else ">", val, old)
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


def _cas_loop(builder, ptr, dt, compute):
    """``old = *ptr; do { new = compute(old) } while (!cas(ptr, old, new))``; returns old."""
    is_float = isinstance(dt, types.Float)
    iptr, ity = _int_view(builder, ptr, dt)
    fty = ptr.type.pointee
    entry = builder.block
    loop = builder.append_basic_block("atomic_cas_loop")
    done = builder.append_basic_block("atomic_cas_done")
    init = builder.load_atomic(iptr, _ORDER, align=dt.bitwidth // 8)
    builder.branch(loop)
    builder.position_at_end(loop)
    phi = builder.phi(ity)
    phi.add_incoming(init, entry)
    old = builder.bitcast(phi, fty) if is_float else phi
    new = compute(old)
    new_i = builder.bitcast(new, ity) if is_float else new
    res = builder.cmpxchg(iptr, phi, new_i, _ORDER, _ORDER)
    got = builder.extract_value(res, 0)
    ok = builder.extract_value(res, 1)
    phi.add_incoming(got, builder.block)
    builder.cbranch(ok, done, loop)
    builder.position_at_end(done)
    return builder.bitcast(phi, fty) if is_float else phi


def _atomic_codegen(op, dt, builder, ptr, operands):
    """One relaxed atomic ``op`` at ``ptr``; returns the old value."""
    is_float = isinstance(dt, types.Float)
    val = operands[-1]
    if op == "cas":
        iptr, ity = _int_view(builder, ptr, dt)
        c, v = ((builder.bitcast(x, ity) if is_float else x) for x in operands)
        old = builder.extract_value(builder.cmpxchg(iptr, c, v, _ORDER, _ORDER), 0)
        return builder.bitcast(old, ptr.type.pointee) if is_float else old
    if not is_float and op in _INT_RMW:
        return builder.atomic_rmw(_INT_RMW[op], ptr, val, _ORDER)
    if not is_float and op in ("min", "max"):
        return builder.atomic_rmw(("" if dt.signed else "u") + op, ptr, val, _ORDER)
    if is_float and op == "exch":
        iptr, ity = _int_view(builder, ptr, dt)
        old = builder.atomic_rmw("xchg", iptr, builder.bitcast(val, ity), _ORDER)
        return builder.bitcast(old, ptr.type.pointee)
    return _cas_loop(builder, ptr, dt, lambda old: _new_value(builder, op, old, operands, dt))


def _plain_codegen(op, dt, builder, ptr, operands):
    """``old = *ptr; *ptr = new(old)`` with an ordinary load and store; returns old."""
    old = builder.load(ptr)
    builder.store(_new_value(builder, op, old, operands, dt), ptr)
    return old


def _make(op: str, plain: bool):
    emit = _plain_codegen if plain else _atomic_codegen

    def _typed(ary, idx, vals):
        if not isinstance(ary, types.Array):
            return None
        dt = ary.dtype
        sig = dt(ary, idx, *vals)

        def codegen(context, builder, signature, args):
            aryty, idxty = signature.args[0], signature.args[1]
            ptr = _element_pointer(context, builder, aryty, args[0], args[1], idxty)
            operands = [context.cast(builder, v, t, dt) for v, t in zip(args[2:], signature.args[2:])]
            return emit(op, dt, builder, ptr, operands)

        return sig, codegen

    if op == "cas":

        @intrinsic
        def _atomic(typingctx, ary, idx, compare, value):
            return _typed(ary, idx, (compare, value))
    else:

        @intrinsic
        def _atomic(typingctx, ary, idx, value):
            return _typed(ary, idx, (value,))

    _atomic.__name__ = f"{'plain' if plain else 'atomic'}_{op}"
    return _atomic


for _op in _OPS:
    globals()[f"atomic_{_op}"] = _make(_op, plain=False)
    globals()[f"plain_{_op}"] = _make(_op, plain=True)


@intrinsic
def fence(typingctx):
    """``acc.mem_fence``: a sequentially consistent LLVM fence (blocks run concurrently on cpu_threads)."""

    def codegen(context, builder, signature, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.none(), codegen


__all__ = ["fence", "numba_atomic"] + [f"{kind}_{op}" for kind in ("atomic", "plain") for op in _OPS]
