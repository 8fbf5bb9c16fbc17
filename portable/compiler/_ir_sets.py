"""The closed vocabulary of the kernel IR (:mod:`portable.compiler.ir`): every value an operation
field of a node may take (the work-division queries, atomic operations and hierarchies, warp
operations, block predicates and collectives, fence scopes, math functions, bit intrinsics,
operators, the alpaka loop kinds), gathered in :data:`OPERATION_SETS`, which ``verify`` checks
each node against. The node classes are ``ir``'s; ``ir`` re-exports every name here."""

from __future__ import annotations

from .operations import INTRINSICS, MATH, OPERATORS, UNARY
from .types import COMPARE_OPS

#: primitive work-division queries (per dimension)
INDEX_QUERIES = ("block_idx", "thread_idx", "grid_blocks", "block_threads", "thread_elements")
#: atomic read-modify-write operations, all returning the old value
ATOMIC_OPS = ("add", "sub", "min", "max", "exch", "cas", "and", "or", "xor", "inc", "dec")
ATOMIC_HIERARCHIES = ("grid", "block", "threads")
#: warp-level operations (alpaka's warp::getSize/activemask/all/any/ballot/shfl/shflUp/shflDown/shflXor)
WARP_OPS = (
    "size",
    "active_mask",
    "all",
    "any",
    "ballot",
    "shfl",
    "shfl_up",
    "shfl_down",
    "shfl_xor",
    "ballot_mask",  # alpaka's ballot(acc, mask, p) and shfl(acc, mask, v, lane): explicit member masks
    "shfl_mask",
    "match_any",  # CUDA's __match_any_sync / __match_all_sync over the active lanes
    "match_all",
    "shfl_width",  # alpaka's shfl(acc, v, lane, width): acc.warp_shfl(v, lane, width=w)
)
#: block-synchronising predicates (alpaka's syncBlockThreadsPredicate<BlockCount|BlockAnd|BlockOr>)
BLOCK_PREDICATES = ("count", "and", "or")
#: the work-group collectives of BlockCollective (``acc.block_<op>``)
BLOCK_COLLECTIVES = ("scan_add", "reduce_add")
#: memory fence scopes (alpaka's memory_scope::Block|Grid|Device)
FENCE_SCOPES = ("block", "grid", "device")
#: functions a kernel may call (``math.<name>``, builtins ``min``/``max``/``abs``): declared in
#: :mod:`portable.compiler.operations`
MATH_FUNCTIONS = tuple(MATH)
#: the bit intrinsics (``acc.popcount``...), declared there too: a ``MathCall`` of one of these
BIT_INTRINSICS = tuple(INTRINSICS)
#: name of the dynamic shared memory size (bytes) inside a kernel that uses it
DYNAMIC_SHARED_BYTES = "dynamic_shared_bytes"
#: operators of UnaryOp, BinOp (each declared in :mod:`portable.compiler.operations`), Compare, BoolOp
UNARY_OPS = tuple(UNARY)
BINARY_OPS = tuple(OPERATORS)
BOOL_OPS = ("and", "or")
#: every operation of the IR is one of a closed set: ``(node kind, field) -> the values it may
#: take`` (``verify`` checks each node against it; the other ``str`` fields are names and messages)
OPERATION_SETS: dict[tuple[str, str], tuple[str, ...]] = {
    ("Index", "query"): INDEX_QUERIES,
    ("UnaryOp", "op"): UNARY_OPS,
    ("BinOp", "op"): BINARY_OPS,
    ("Compare", "op"): COMPARE_OPS,
    ("BoolOp", "op"): BOOL_OPS,
    ("MathCall", "func"): MATH_FUNCTIONS + BIT_INTRINSICS + ("bit_cast",),
    ("AtomicOp", "op"): ATOMIC_OPS,
    ("AtomicOp", "hierarchy"): ATOMIC_HIERARCHIES,
    ("WarpOp", "op"): WARP_OPS,
    ("BlockPredicate", "op"): BLOCK_PREDICATES,
    ("BlockCollective", "op"): BLOCK_COLLECTIVES,
    ("MemFence", "scope"): FENCE_SCOPES,
    ("StridedLoop", "kind"): (
        "uniform_elements",
        "uniform_groups",
        "uniform_group_elements",
        "independent_groups",
        "independent_group_elements",
    ),
}
