"""The typed intermediate representation (IR) of a kernel: what every emitter consumes.

The front-end (:mod:`portable.compiler._frontend`) turns a kernel's Python source plus a launch
signature into one :class:`KernelDef`; an emitter (numba Python for the CPU backends, OpenCL C,
CUDA C) walks it. Nothing here is specific to one emitter. Types come from
:mod:`portable.compiler.types`; the closed sets of values each operation field may take
(``OPERATION_SETS`` and the sets it gathers) from :mod:`portable.compiler._ir_sets`, under the
same names here.

Conventions
-----------
- Every expression node has ``.type`` (a :class:`~portable.compiler.types.ScalarType`). Implicit
  conversions are explicit :class:`Cast` nodes: the operands of :class:`BinOp` and
  :class:`Compare` already have the operation's operand type, the value of :class:`Assign`,
  :class:`Store`, :class:`Return` and atomic operands already have the destination's type.
- Every local variable is listed with its type in ``Function.locals`` (C declares them at the
  top of the function; Python scoping: one type per name for the whole function). Names are
  already safe identifiers: user locals are ``v_<name>``, front-end temporaries ``t<N>_...``,
  kernel parameters ``a<k>_...``, shared arrays ``sh_<name>`` (names only: an emitter tells an
  array's memory by its ``type.kind``, never by its name).
- Work-division queries are the five primitives of :class:`Index`; everything else
  (``global_thread_idx``, ``grid_threads``, ``once_per_block``...) is built from them.
- Dimension ``d`` counts from 0 = slowest-varying, as in alpaka; ``KernelDef.ndim`` is 1-3.
  A C emitter maps dimension ``ndim-1`` to CUDA's ``x`` (OpenCL ``get_*_id(0)``).

Node kinds
----------
Expressions (fields; all have ``type``):

- ``Const(value)``: a Python bool/int/float of ``type``.
- ``Var(name)``: a local variable or a scalar kernel/function parameter.
- ``Index(query, dim)``: ``query`` in :data:`INDEX_QUERIES` along ``dim``; type int64.
- ``Cast(value)``: numeric conversion to ``type`` (C semantics: float -> int truncates toward 0;
  to bool means ``!= 0``).
- ``UnaryOp(op, operand)``: ``op`` in ``- ~ not``; operand already of ``type`` (``not``: bool).
- ``BinOp(op, left, right)``: ``op`` in ``+ - * / // % ** & | ^ << >>``. Both operands have
  ``type`` except shifts (right operand keeps its own integer type). **Python semantics**:
  ``//`` floors and ``%`` takes the divisor's sign (ints and floats); ``/`` is true division
  (ints were cast to float64 already); integer ``**`` is repeated multiplication (non-negative
  exponents); integer division by zero is undefined (C) / raises (numba).
- ``Compare(op, left, right)``: ``op`` in ``< <= > >= == !=``, operands of one common type; bool.
- ``BoolOp(op, values)``: ``and`` / ``or`` of bool values, short-circuit; bool.
- ``Select(cond, if_true, if_false)``: ``if_true if cond else if_false`` (both of ``type``), lazy.
- ``MathCall(func, args)``: ``func`` in :data:`MATH_FUNCTIONS`; the args are cast to the
  computation type (float32 or float64; for ``min``/``max``/``abs`` any numeric type);
  ``floor``/``ceil``/``trunc`` return int64 (Python's int result), ``isnan``... return bool;
  ``bit_cast`` (``acc.bit_cast``): its one argument's bits as ``type``, a float and an integer of
  the same size. Or ``func`` in :data:`BIT_INTRINSICS` (``acc.popcount(x)``...) of a 32- or
  64-bit integer.
- ``Load(array, indices, check)``: element of an :class:`ArrayRef`; indices are int64 expressions,
  as many as ``array.type.ndim`` (none for a scalar field). ``check`` (also on ``Store`` and
  ``AtomicOp``) is None, or under ``ALPYKA_DEBUG=1`` the message to raise (CPU) / report (GPU)
  when an index is outside ``[0, extent)`` of ``array.extents``; the check happens exactly when
  the access does (so ``i < n and x[i] > 0`` never checks ``x[n]``). **No wrap-around**: an
  index is an offset from the first element on every backend (``docs/kernels.md``, "Indices"):
  a negative index is out of range like ``extent``; without a check an emitter must address
  ``base + index * stride`` as C does (never numba's/numpy's ``index + extent``). The front-end
  refuses constant negative indices and constant indices past constant extents.
- ``AtomicOp(op, array, indices, operands, hierarchy, check)``: ``op`` in :data:`ATOMIC_OPS`; returns the
  old value (``type`` = the element type). ``operands`` = ``(value,)``, or ``(compare, value)`` for
  ``cas``. ``inc``: ``old >= value ? 0 : old + 1``; ``dec``: ``(old == 0 or old > value) ? value :
  old - 1`` (alpaka / CUDA wrap semantics). ``hierarchy`` in ``grid / block / threads``.
- ``DeviceCall(function, args)``: call of ``KernelDef.functions[function]``; ``args`` match its
  params one to one (an :class:`ArrayRef` for an array param, an expression for a scalar one).
  A call of a function returning several values (``type`` a :class:`~portable.compiler.types.TupleType`)
  appears only as the ``call`` of a :class:`CallAssign`, never inside an expression.
- ``Pack(items)``: the values ``return a, b`` gives (``type`` a ``TupleType``, each item already
  of its position's type); only as the ``value`` of a ``Return``.
- ``WarpOp(op, args)``: ``op`` in :data:`WARP_OPS`, over the calling thread's warp (alpaka's
  ``warp::*``): ``size`` (int64), ``active_mask`` (uint64), ``all``/``any`` of a bool (bool),
  ``ballot`` of a bool (uint64, bit k for lane k), ``shfl(v, lane)``, ``shfl_up(v, delta)``,
  ``shfl_down(v, delta)``, ``shfl_xor(v, mask)`` (``type`` = ``v``'s; the lane/delta/mask operand is
  int32); ``ballot_mask(mask, p)``, ``shfl_mask(mask, v, lane)`` over the lanes the uint64 ``mask``
  names (CUDA's member mask). A shuffle whose source lane is outside the warp returns the caller's own ``v``.
  ``match_any(v)`` (uint64: the active lanes whose ``v`` has the caller's bits), ``match_all(v)``
  (uint64: the active lanes when all hold the same bits, else 0), ``v`` a 32- or 64-bit value;
  ``shfl_width(v, lane, width)``: ``shfl`` within segments of ``width`` lanes (a constant power of
  two below 64; the warp size where that is smaller). Backends with one-thread warps (the CPU
  ones) return ``v``, ``p``, 1 or ``p`` as a bit.
- ``BlockPredicate(op, value)``: a barrier of the whole block (as ``SyncBlockThreads``) that also
  reduces the bool ``value`` over the block's threads: ``count`` (int64), ``and``/``or`` (bool).
- ``BlockCollectives()`` (bool): whether the block's threads have native work-group collectives;
  only as the whole condition of an ``If``, whose body may then use ``BlockCollective``. An emitter
  compiles the body where its target has them (OpenCL C 2.0+, chosen when the program is built)
  and the ``orelse`` everywhere else (the CPU backends, CUDA, HIP).
- ``SingleThreadPerBlock()`` (bool): CMSSW's ``requires_single_thread_per_block_v<TAcc>``: whether
  the target runs each block as one thread of scalar code (the CPU backends: True) rather than as
  lanes in lockstep (OpenCL, CUDA, HIP: False); only as the whole condition of an ``If``, of which
  an emitter compiles one branch (a choice of speed: both must compute the same values).
- ``BlockCollective(op, value)``: ``op`` in :data:`BLOCK_COLLECTIVES` over the block's threads,
  met by every thread of the block (``type`` = ``value``'s; integers wrap): ``scan_add``, the
  inclusive sum in thread order, ``reduce_add``, the block's sum to every thread. An emitter
  whose collectives would add floats in another order than the ``orelse`` compiles the ``orelse``.

Arrays: ``ArrayRef(name, type, extents, pitch)``: ``name`` is a kernel/function array parameter
or a shared array; ``type`` an :class:`~portable.compiler.types.ArrayType` (kind, dtype, const);
``extents`` the logical extent of each index (int64 expressions, used for range checks and for
buffer addressing); ``pitch`` (vector and matrix kinds) the distance in elements between two
component columns. An emitter needing the extents/pitch inside a device function passes them as
extra parameters (a function's array params carry ``Var`` extents named ``<name>_e<d>`` and
``<name>_pitch`` for that purpose).

Statements:

- ``Assign(target, value)``: ``target`` a local :class:`Var`.
- ``Store(array, indices, value, check)``: ``array[indices] = value``.
- ``ExprStmt(value)``: evaluate for side effects (atomics, device calls).
- ``CallAssign(targets, call)``: ``targets = call`` for a ``DeviceCall`` whose function returns
  several values: target ``k`` (a local :class:`Var` of position ``k``'s type) gets value ``k``.
  The front-end gives fresh temporaries as targets, never a variable the call's arguments read.
- ``If(cond, body, orelse)``, ``While(cond, body)``.
- ``ForRange(var, start, stop, step, body)``: Python ``range``; ``step`` may be negative
  (``var`` walks down while ``var > stop``); a step not known when compiling carries ``check``,
  the message of the KernelValueError every emitter raises when it is 0 at run time (a constant
  0 is a KernelSyntaxError).
- ``StridedLoop(kind, var, dim, start, stop, stride, chunk, body, local_var, group_base)``: the
  alpaka loops, all of one shape::

      for base = start; base < stop; base += stride:
          for var = base; var < min(base + chunk, stop); var += 1:
              local_var = var - group_base      # only when local_var is not None
              body

  ``kind`` names the alpaka construct (``uniform_elements``, ``uniform_groups``,
  ``uniform_group_elements``, ``independent_groups``, ``independent_group_elements``) so an
  emitter may lower it its own way; ``start/stop/stride/chunk/group_base`` are int64 expressions
  evaluated once before the loop. ``break`` / ``continue`` directly inside ``body`` leave / go to
  the next index of the *whole* StridedLoop (a Python ``break`` in ``for i in
  acc.uniform_elements(n)`` ends every chunk), so an emitter using two nested loops must carry
  the break out of the inner loop.
- ``Break()``, ``Continue()``: of the innermost ``While``/``ForRange``/``StridedLoop``.
- ``Return(value)``: ``value`` None in kernels (the thread stops) and void functions; a
  :class:`Pack` in a function returning several values.
- ``SyncBlockThreads()``: barrier of all threads of a block (a no-op with one thread per block).
- ``MemFence(scope)``: orders the calling thread's memory accesses as seen by the other threads of
  ``scope`` in :data:`FENCE_SCOPES` (alpaka's ``mem_fence``); no barrier.
- ``Assert(cond, message)``: ``assert cond, "..."``: when the bool ``cond`` is false the thread
  reports ``message`` (the whole KernelAssertionError text: kernel, file, line, the user's
  message) and stops: the CPU emitter raises it; the C emitter reports it through the error flag
  (the first report of a launch wins) and returns (from a device function: with 0, the thread
  goes on). Absent under ``ALPYKA_ASSERTS=0`` (the front-end drops it).
- ``Print(items)``: ``print(...)``: ``items`` are string constants (``str``) and scalar
  expressions, printed separated by spaces with a newline (numba's print, C's ``printf``).
- ``DeclareLocal(array)``: ``acc.local_array(shape, dtype)``: the per-thread array ``array``
  (kind ``private``, constant extents; listed in ``KernelDef.private`` or ``Function.private``)
  starts here with every element zero (each time the statement runs, as a new array would).

Functions and kernels:

- ``Param(name, type, role, arg_index, field)``: one flattened kernel parameter. ``type`` is an
  ArrayType (``role`` ``"array"``) or a ScalarType (roles ``"value"`` = a scalar argument,
  ``"size"`` = a view's element count, ``"pitch"`` = a vector/matrix field's component pitch in
  elements, ``"extent"`` = extent ``field`` (an int as a string) of a buffer). ``arg_index`` is the
  Python argument it comes from; ``field`` the view field name for view-derived params.
- ``Function(name, params, return_type, locals, body, uses_acc, source_name, private)``: a device
  function specialised for one signature; ``params`` are ``Var`` (scalars) and ``ArrayRef``
  (arrays); ``return_type`` a ScalarType, VOID or a TupleType (several values: C emitters pass
  them back through out-pointers, the numba inliner assigns them to the call's targets);
  ``private`` its own per-thread arrays (``acc.local_array``), declared at its top.
- ``SharedArray(name, dtype, shape)``: a static per-block array declared by the kernel.
  ``KernelDef.private`` lists per-thread arrays of the same form (kind ``private``: a random engine's
  state, ``acc.local_array``), declared once at the top of the kernel; each thread has its own.
- ``KernelDef(name, ndim, params, args, locals, body, shared, functions, uses_dynamic_shared,
  debug, source_file, first_line)``: the entry point. The launch also provides the work
  division (whose extents the :class:`Index` nodes read) and, when ``uses_dynamic_shared``, the
  dynamic shared memory size in bytes (``DYNAMIC_SHARED_BYTES`` is the name of that int64 value
  inside the kernel; every ``dynamic_shared`` array starts at the same address).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from typing import Any

from . import _ir_sets
from .types import BOOL, INDEX, ArrayType, ScalarType, TupleType, VoidType

# the closed operation sets, declared in _ir_sets (what each operation field of a node may take)
ATOMIC_HIERARCHIES = _ir_sets.ATOMIC_HIERARCHIES
ATOMIC_OPS = _ir_sets.ATOMIC_OPS
BINARY_OPS = _ir_sets.BINARY_OPS
BIT_INTRINSICS = _ir_sets.BIT_INTRINSICS
BLOCK_COLLECTIVES = _ir_sets.BLOCK_COLLECTIVES
BLOCK_PREDICATES = _ir_sets.BLOCK_PREDICATES
BOOL_OPS = _ir_sets.BOOL_OPS
DYNAMIC_SHARED_BYTES = _ir_sets.DYNAMIC_SHARED_BYTES
FENCE_SCOPES = _ir_sets.FENCE_SCOPES
INDEX_QUERIES = _ir_sets.INDEX_QUERIES
MATH_FUNCTIONS = _ir_sets.MATH_FUNCTIONS
OPERATION_SETS = _ir_sets.OPERATION_SETS
UNARY_OPS = _ir_sets.UNARY_OPS
WARP_OPS = _ir_sets.WARP_OPS


# ----------------------------------------------------------------------------- expressions
class Expr:
    """Base of expression nodes; every expression has ``type``."""

    type: ScalarType


@dataclass(eq=False)
class Const(Expr):
    value: Any
    type: ScalarType


@dataclass(eq=False)
class Var(Expr):
    name: str
    type: ScalarType


@dataclass(eq=False)
class Index(Expr):
    query: str
    dim: int
    type: ScalarType = INDEX


@dataclass(eq=False)
class Cast(Expr):
    value: Expr
    type: ScalarType


@dataclass(eq=False)
class UnaryOp(Expr):
    op: str
    operand: Expr
    type: ScalarType


@dataclass(eq=False)
class BinOp(Expr):
    op: str
    left: Expr
    right: Expr
    type: ScalarType


@dataclass(eq=False)
class Compare(Expr):
    op: str
    left: Expr
    right: Expr
    type: ScalarType = BOOL


@dataclass(eq=False)
class BoolOp(Expr):
    op: str
    values: list[Expr]
    type: ScalarType = BOOL


@dataclass(eq=False)
class Select(Expr):
    cond: Expr
    if_true: Expr
    if_false: Expr
    type: ScalarType


@dataclass(eq=False)
class MathCall(Expr):
    func: str
    args: list[Expr]
    type: ScalarType


@dataclass(eq=False)
class ArrayRef:
    """An array operand (not an expression: arrays are not values)."""

    name: str
    type: ArrayType
    extents: tuple[Expr, ...]
    pitch: Expr | None = None


@dataclass(eq=False)
class Load(Expr):
    array: ArrayRef
    indices: tuple[Expr, ...]
    type: ScalarType
    check: str | None = None


@dataclass(eq=False)
class AtomicOp(Expr):
    op: str
    array: ArrayRef
    indices: tuple[Expr, ...]
    operands: tuple[Expr, ...]
    hierarchy: str
    type: ScalarType
    check: str | None = None


@dataclass(eq=False)
class DeviceCall(Expr):
    function: str
    args: list[Expr | ArrayRef]
    type: Any  # ScalarType or VOID


@dataclass(eq=False)
class Pack(Expr):
    items: list[Expr]
    type: TupleType


@dataclass(eq=False)
class WarpOp(Expr):
    op: str
    args: list[Expr]
    type: ScalarType


@dataclass(eq=False)
class BlockPredicate(Expr):
    op: str
    value: Expr
    type: ScalarType


@dataclass(eq=False)
class BlockCollectives(Expr):
    type: ScalarType


@dataclass(eq=False)
class SingleThreadPerBlock(Expr):
    type: ScalarType


@dataclass(eq=False)
class BlockCollective(Expr):
    op: str
    value: Expr
    type: ScalarType


# ----------------------------------------------------------------------------- statements
class Stmt:
    """Base of statement nodes; ``line`` is the line in the kernel's source file (or 0)."""

    line: int


@dataclass(eq=False)
class Assign(Stmt):
    target: Var
    value: Expr
    line: int = 0


@dataclass(eq=False)
class Store(Stmt):
    array: ArrayRef
    indices: tuple[Expr, ...]
    value: Expr
    line: int = 0
    check: str | None = None


@dataclass(eq=False)
class ExprStmt(Stmt):
    value: Expr
    line: int = 0


@dataclass(eq=False)
class CallAssign(Stmt):
    targets: list[Var]
    call: DeviceCall
    line: int = 0


@dataclass(eq=False)
class If(Stmt):
    cond: Expr
    body: list[Stmt]
    orelse: list[Stmt]
    line: int = 0


@dataclass(eq=False)
class While(Stmt):
    cond: Expr
    body: list[Stmt]
    line: int = 0


@dataclass(eq=False)
class ForRange(Stmt):
    var: Var
    start: Expr
    stop: Expr
    step: Expr
    body: list[Stmt]
    line: int = 0
    #: the KernelValueError message of a step that is zero at run time (a step not known when compiling)
    check: str | None = None


STRIDED_LOOP_KINDS = OPERATION_SETS[("StridedLoop", "kind")]


@dataclass(eq=False)
class StridedLoop(Stmt):
    kind: str
    var: Var
    dim: int
    start: Expr
    stop: Expr
    stride: Expr
    chunk: Expr
    body: list[Stmt]
    local_var: Var | None = None
    group_base: Expr | None = None
    line: int = 0


@dataclass(eq=False)
class Break(Stmt):
    line: int = 0


@dataclass(eq=False)
class Continue(Stmt):
    line: int = 0


@dataclass(eq=False)
class Return(Stmt):
    value: Expr | None = None
    line: int = 0


@dataclass(eq=False)
class SyncBlockThreads(Stmt):
    line: int = 0


#: the nodes that are a barrier of the whole block
BLOCK_BARRIERS = (SyncBlockThreads, BlockPredicate, BlockCollective)


@dataclass(eq=False)
class MemFence(Stmt):
    scope: str
    line: int = 0


@dataclass(eq=False)
class Assert(Stmt):
    cond: Expr
    message: str
    line: int = 0


@dataclass(eq=False)
class Print(Stmt):
    items: list[str | Expr]
    line: int = 0


@dataclass(eq=False)
class DeclareLocal(Stmt):
    array: ArrayRef
    line: int = 0


# ----------------------------------------------------------------------------- functions
@dataclass(eq=False)
class Param:
    name: str
    type: ScalarType | ArrayType
    role: str  # "array", "value", "size", "pitch", "extent"
    arg_index: int
    field: str = ""


@dataclass(eq=False)
class SharedArray:
    name: str
    dtype: ScalarType
    shape: tuple[int, ...]


@dataclass(frozen=True)
class SharedNeed:
    """A static shared array that a device function needs at least ``minimum(block_threads)``
    elements of (``@pk.device_function(min_shared={param: rule})``): ``label`` names the array
    (``shared array 'ws'``), ``elements`` is its size, ``param`` the parameter that needs it.
    Checked against each launch's threads per block, before the kernel is built for a device."""

    array: str
    label: str
    elements: int
    param: str
    minimum: Callable[[int], int]


@dataclass(eq=False)
class Function:
    name: str
    params: list[Var | ArrayRef]
    return_type: ScalarType | VoidType | TupleType
    locals: dict[str, ScalarType]
    body: list[Stmt]
    uses_acc: bool = False
    source_name: str = ""
    #: per-thread arrays of the function (``acc.local_array``), declared at its top
    private: list[SharedArray] = field(default_factory=list)


@dataclass(eq=False)
class KernelDef:
    name: str
    ndim: int
    params: list[Param]
    locals: dict[str, ScalarType]
    body: list[Stmt]
    shared: list[SharedArray] = field(default_factory=list)
    functions: dict[str, Function] = field(default_factory=dict)
    uses_dynamic_shared: bool = False
    debug: bool = False
    source_file: str = ""
    first_line: int = 0
    #: Param objects of each Python argument, in argument order (``args[k]`` lists those of arg k)
    args: list[list[Param]] = field(default_factory=list)
    #: per-thread arrays (kind ``private``), declared at the top of the kernel
    private: list[SharedArray] = field(default_factory=list)
    #: minimum sizes of shared arrays in terms of the block's threads (see :class:`SharedNeed`)
    shared_needs: list[SharedNeed] = field(default_factory=list)
    #: ``@pk.kernel(fast_math=True)``: the backends may contract ``a*b + c`` into FMAs and relax
    #: IEEE rules (docs/kernels.md, "Same bits on every backend"); off, every backend gives numpy's bits
    fast_math: bool = False


def walk(stmts: list[Stmt]):
    """Every statement of ``stmts``, nested ones included (pre-order)."""
    for s in stmts:
        yield s
        for attr in ("body", "orelse"):
            inner = getattr(s, attr, None)
            if inner:
                yield from walk(inner)


@functools.cache
def field_names(cls: type) -> tuple[str, ...]:
    """The names of IR class ``cls``'s fields, in order: what a pass rebuilding a node passes to
    ``cls(...)`` (every field is set by the constructor). Cached per class: ``dataclasses.fields``
    took a fifth of the CPU pipeline's time on large kernels."""
    return tuple(f.name for f in fields(cls) if f.init)


def nodes(x: Any) -> Iterator[Any]:
    """Every IR node under ``x`` (expressions, statements, array references), ``x`` included."""
    stack = [x]
    while stack:
        y = stack.pop()
        if isinstance(y, (list, tuple)):
            stack.extend(y)
        elif isinstance(y, (Expr, Stmt, ArrayRef)):
            yield y
            stack.extend(v for v in vars(y).values() if isinstance(v, (list, tuple, Expr, Stmt, ArrayRef)))
