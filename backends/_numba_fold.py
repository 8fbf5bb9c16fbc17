"""What the numba emitter knows of an integer expression when it writes the code: the values of
``+ - *`` over constants and a CPU block's fixed indices, folded away so that numba has less to
type and compile (the first launch's cost)."""

from __future__ import annotations

from portable.compiler import ir

#: the integer operators :meth:`KnownIntegers.fold` works out where an operand is known
FOLDED = ("+", "-", "*")


class KnownIntegers:
    """The integer values an emitter knows: constants, a CPU block's thread index 0 and thread
    count 1, and (while :attr:`block_idx_zero` is set: the flat grid loop's first block) block
    index 0, combined by ``+ - *`` within their type's range."""

    def __init__(self) -> None:
        self.block_idx_zero = False  # block_idx is 0 (the flat grid loop's first index)
        self._values: dict[tuple[int, bool], int | None] = {}  # known()'s, per integer + - * node

    def known(self, e: object) -> int | None:
        """The value of an integer expression known when the code is emitted (a constant, a CPU
        block's thread index 0 and thread count 1, the flat loop's first block index 0, and
        ``+ - *`` of those within the type's range; ``0 * x`` where ``x`` reads nothing: an index,
        a variable or arithmetic of those), else None."""
        if isinstance(e, ir.Const):
            return int(e.value) if e.type.is_integer and not e.type.is_bool else None
        if isinstance(e, ir.Index):
            if e.query == "thread_idx" or (e.query == "block_idx" and self.block_idx_zero):
                return 0
            return 1 if e.query == "block_threads" else None
        if not (isinstance(e, ir.BinOp) and e.op in FOLDED and e.type.is_integer):
            return None
        key = (id(e), self.block_idx_zero)  # once per node: a long chain is walked once, not once a level
        if key not in self._values:
            self._values[key] = self._known_binop(e)
        return self._values[key]

    def _known_binop(self, e: ir.BinOp) -> int | None:
        a, b = self.known(e.left), self.known(e.right)
        if e.op == "*" and ((a == 0 and reads_nothing(e.right)) or (b == 0 and reads_nothing(e.left))):
            return 0
        if a is None or b is None:
            return None
        v = a + b if e.op == "+" else a - b if e.op == "-" else a * b
        lo = 0 if e.type.is_unsigned else -(2 ** (e.type.bits - 1))
        return v if lo <= v < lo + 2**e.type.bits else None

    def fold(self, e: object) -> int | ir.Expr | None:
        """What an integer ``+ - *`` comes to when an operand is known (:meth:`known`): its value,
        or the operand it leaves (``x * 1``, ``x + 0``, ``x - 0``, of ``e``'s type); None when
        nothing folds."""
        if not (isinstance(e, ir.BinOp) and e.op in FOLDED and e.type.is_integer and not e.type.is_bool):
            return None
        v = self.known(e)
        if v is not None:
            return v
        a, b = self.known(e.left), self.known(e.right)
        keep = None
        if b == (1 if e.op == "*" else 0):
            keep = e.left
        elif a == (1 if e.op == "*" else 0) and e.op != "-":
            keep = e.right
        return keep if keep is not None and keep.type == e.type else None


def reads_nothing(e: object) -> bool:
    """Whether ``e`` is indices, variables and constants combined by operators (no load, no
    call, no atomic): dropping it from ``0 * e`` changes nothing."""
    if isinstance(e, (ir.Index, ir.Var, ir.Const)):
        return True
    if isinstance(e, ir.BinOp) and e.op in FOLDED:  # no division: its zero divisor stays
        return reads_nothing(e.left) and reads_nothing(e.right)
    return isinstance(e, ir.Cast) and reads_nothing(e.value)
