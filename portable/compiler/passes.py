"""The compiler's passes over the kernel IR, run in order by a :class:`PassManager`.

A pass rewrites a kernel's IR into IR (or finds a fact about it) with nothing backend-specific;
an emitter asks its pipeline for the state the passes leave and writes its source from that
(numba's ``compiler_machinery.PassManager`` is the model: named passes, run in order over one
state). The front end (:func:`portable.compiler._frontend.build_kernel`) is the first step of
every pipeline; the passes come after it:

- :class:`InlineDeviceFunctions` (``inline_device_functions``): every device-function call
  replaced by a copy of the function's body (:mod:`portable.compiler._inline`);
- :class:`FoldKnownValues` (``fold_known_values``): integer arithmetic of constants, locals
  assigned one constant and branches of known conditions folded (an inlined call's constant
  arguments: :mod:`portable.compiler._known_values`);
- :class:`UnrollForLocalArrays` (``unroll_for_local_arrays``) and :class:`ScalarizeLocalArrays`
  (``scalarize_local_arrays``): short constant loops over per-thread arrays unrolled, then the
  arrays indexed only by constants made scalar locals (:mod:`portable.compiler._local_arrays`),
  with :class:`FoldUnrolledValues` (``fold_unrolled_values``) between them;
- :class:`FuseGroupLoops` (``fuse_group_loops``): a ``uniform_groups`` loop whose body is one
  ``uniform_group_elements`` loop over its group made the one ``uniform_elements`` loop that
  walks the same indices (:mod:`portable.compiler._group_loops`);
- :class:`FindFlatGridLoop` (``find_flat_grid_loop``): whether the kernel's blocks can run as one
  flat element loop on a CPU (:mod:`portable.compiler._grid_loop`).

:data:`CPU_PIPELINE` is the numba emitter's list; the C emitters take the front end's IR as it
is (their device functions stay functions: ``static inline`` / ``__forceinline__``).

With ``ALPYKA_VERIFY_IR=1`` (the test suite turns it on in tests/conftest.py) the IR is checked
by :func:`verify` after the front end and after every pass: explicit casts, typed locals and
operations of the declared sets (:mod:`portable.compiler._verify`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .._errors import ArgumentError
from . import ir
from ._definitions import fewer_definitions
from ._depth import deep_recursion
from ._grid_loop import FlatGridLoop, flat_grid_loop
from ._group_loops import fuse_group_loops
from ._inline import inline_device_functions, kernel_body_in_block_loop
from ._known_values import fold_known_values
from ._local_arrays import scalarize_local_arrays, unroll_for_local_arrays
from ._verify import IRVerifyError, verify, verify_enabled


@dataclass
class CompileState:
    """What the passes of a pipeline work on: the kernel's IR (each rewriting pass replaces it)
    and the facts the analysis passes found."""

    kernel: ir.KernelDef
    #: :class:`FindFlatGridLoop`'s finding: the kernel as prelude + one flat loop, or None
    flat_grid_loop: FlatGridLoop | None = None


class CompilerPass:
    """One step of a pipeline: ``run(state)`` rewrites ``state.kernel`` or records a fact on
    ``state``; ``name`` is what errors and :class:`PassManager` call it."""

    name: ClassVar[str] = ""

    def run(self, state: CompileState) -> None:
        raise NotImplementedError


class InlineDeviceFunctions(CompilerPass):
    """Every device-function call inlined (a new KernelDef without functions)."""

    name = "inline_device_functions"

    def run(self, state: CompileState) -> None:
        state.kernel = inline_device_functions(state.kernel)


class FoldKnownValues(CompilerPass):
    """Integer arithmetic of constants, constant locals and branches of known conditions folded."""

    name = "fold_known_values"

    def run(self, state: CompileState) -> None:
        state.kernel = fold_known_values(state.kernel)


class FoldUnrolledValues(FoldKnownValues):
    """:class:`FoldKnownValues` again after unrolling: each copy's conditions on its loop
    variable (``if i > 1:``) are known, and a dead branch's indices (``s[i - 2]`` of ``i = 0``)
    no longer keep an array from becoming scalars."""

    name = "fold_unrolled_values"


class UnrollForLocalArrays(CompilerPass):
    """Each ``range()`` of a few constant trips whose variable indexes a per-thread array, unrolled."""

    name = "unroll_for_local_arrays"

    def run(self, state: CompileState) -> None:
        state.kernel = unroll_for_local_arrays(state.kernel)


class ScalarizeLocalArrays(CompilerPass):
    """Per-thread arrays indexed only by constants replaced by one scalar local per element."""

    name = "scalarize_local_arrays"

    def run(self, state: CompileState) -> None:
        state.kernel = scalarize_local_arrays(state.kernel)


class FuseGroupLoops(CompilerPass):
    """Each group loop that is one element loop (no per-group work) made that element loop."""

    name = "fuse_group_loops"

    def run(self, state: CompileState) -> None:
        state.kernel = fuse_group_loops(state.kernel)


class FindFlatGridLoop(CompilerPass):
    """``state.flat_grid_loop``: the kernel's one flat-able ``uniform_elements`` loop, or None."""

    name = "find_flat_grid_loop"

    def run(self, state: CompileState) -> None:
        state.flat_grid_loop = flat_grid_loop(state.kernel)


class PassManager:
    """Named passes run in order over one :class:`CompileState`; with :func:`verify_enabled`
    the IR is verified after each (IRVerifyError naming the pass that broke it)."""

    def __init__(self, name: str, passes: list[CompilerPass]) -> None:
        names = [p.name for p in passes]
        if len(set(names)) != len(names) or not all(names):
            raise ArgumentError(
                f"pipeline {name!r}: every pass needs a name of its own, got {names}; set each pass class's name"
            )
        self.name = name
        self.passes = list(passes)

    @property
    def pass_names(self) -> list[str]:
        return [p.name for p in self.passes]

    @deep_recursion  # a 1000-term expression is a 1000-deep tree the passes recurse through
    def run(self, kernel: ir.KernelDef) -> CompileState:
        """The state after every pass ran on ``kernel`` (which is left unchanged)."""
        state = CompileState(kernel)
        check = verify_enabled()
        for p in self.passes:
            p.run(state)
            if check:
                verify(state.kernel, after=f"the {self.name} pipeline's pass {p.name!r}")
        return state


#: the numba emitter's passes (the cpu_serial and cpu_threads backends)
CPU_PIPELINE = PassManager(
    "cpu",
    [
        InlineDeviceFunctions(),
        FoldKnownValues(),
        UnrollForLocalArrays(),
        FoldUnrolledValues(),
        ScalarizeLocalArrays(),
        FuseGroupLoops(),
        FindFlatGridLoop(),
    ],
)

__all__ = [
    "CPU_PIPELINE",
    "CompileState",
    "CompilerPass",
    "FindFlatGridLoop",
    "FlatGridLoop",
    "FoldKnownValues",
    "FoldUnrolledValues",
    "FuseGroupLoops",
    "IRVerifyError",
    "fewer_definitions",
    "InlineDeviceFunctions",
    "PassManager",
    "ScalarizeLocalArrays",
    "UnrollForLocalArrays",
    "flat_grid_loop",
    "fuse_group_loops",
    "inline_device_functions",
    "kernel_body_in_block_loop",
    "verify",
    "verify_enabled",
]
