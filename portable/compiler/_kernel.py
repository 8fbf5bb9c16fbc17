"""``@pk.kernel`` and ``@pk.device_function``: kernel objects, their IR per launch signature and
the slots where backends keep what they compiled for a kernel (``portable.spi.KernelHandle``)."""

from __future__ import annotations

import importlib
import math
import os
import pickle
import sys
import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from .._errors import ArgumentTypeError, WorkDivError
from ..env import debug_flag
from . import ir
from ._closures import BoundLocal
from ._errors import KernelArgumentError, KernelSyntaxError
from ._frontend import CompileContext, FunctionBuilder, assigned_names, build_kernel, run_builder
from ._library import is_library_function
from ._signature import arg_specs, check_args, signature_key
from ._source import ParsedFunction, parse_function
from ._values import AccVal, DeviceFunctionVal, TupleVal, ViewVal
from ._verify import verify, verify_enabled
from ._written import written_params
from .types import INDEX, VOID, ScalarType

_T = TypeVar("_T")


def debug_enabled() -> bool:
    """True when ``ALPYKA_DEBUG`` asks for range checks inside kernels (read at every launch:
    ``1``/``on``/``true``/``yes`` on, unset or ``0``/``off``/``false``/``no`` off; EnvVarError for
    another value, :func:`portable.env.debug_flag`). Only checked launches call it: os.environ.get's
    ~2 us is ~2% of an emulated cuda checked launch (~100 us), so no private raw-environ read here."""
    return debug_flag(os.environ.get("ALPYKA_DEBUG"))


def _module_name(obj: Any) -> str:
    """The module a kernel is imported from: ``__main__`` run with ``python -m pkg.mod`` is
    ``pkg.mod`` (what another process imports); a plain script stays ``__main__``."""
    name = obj.py_function.__module__ or ""
    if name == "__main__":
        spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        if spec is not None and spec.name and spec.name != "__main__":
            return spec.name
    return name


def _reduce_by_reference(obj: Any, what: str) -> tuple[Callable, tuple[str, str, str]]:
    """``__reduce__`` of kernels and device functions: (module, qualified name), re-imported by
    the process that unpickles it (a Dask worker); the compiled plans stay behind. Raises
    ``pickle.PicklingError`` naming the fix when the object cannot be found again by name."""
    module, qualname = _module_name(obj), obj.__qualname__
    where = f"{what} {obj.__name__!r} ({module}.{qualname})"
    fix = (
        "define it at the top level of a module that the receiving process can import "
        "(e.g. a file next to your script, imported with `from mykernels import ...`)"
    )
    if module == "__main__":
        raise pickle.PicklingError(
            f"cannot pickle {where}: it is defined in the __main__ script, which another "
            f"process does not import under that name; {fix}"
        )
    if "<locals>" in qualname:
        raise pickle.PicklingError(f"cannot pickle {where}: it is defined inside a function; {fix}")
    try:  # looked up where it lives here (a script run with -m is not imported a second time)
        found = _lookup(obj.py_function.__module__ or module, qualname)
    except (ImportError, AttributeError) as exc:
        raise pickle.PicklingError(f"cannot pickle {where}: it cannot be found by that name ({exc}); {fix}") from None
    if found is not obj:
        raise pickle.PicklingError(
            f"cannot pickle {where}: {module}.{qualname} is a different object ({found!r}); {fix}"
        )
    return _import_by_reference, (what, module, qualname)


def _lookup(module: str, qualname: str) -> Any:
    obj: Any = sys.modules.get(module) or importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _import_by_reference(what: str, module: str, qualname: str) -> Any:
    """Unpickling: the kernel or device function ``module.qualname``, imported in this process."""
    try:
        obj = _lookup(module, qualname)
    except (ImportError, AttributeError) as exc:
        raise ImportError(
            f"cannot unpickle {what} {module}.{qualname}: {type(exc).__name__}: {exc}; the module "
            f"must be importable here (on sys.path or installed) wherever the {what} is sent"
        ) from exc
    marker = "__alpyka_kernel__" if what == "kernel" else "__alpyka_device_function__"
    if not getattr(obj, marker, False):
        raise ArgumentTypeError(
            f"cannot unpickle {what} {module}.{qualname}: that name is {obj!r} here, not a {what}; the module "
            f"must define it with @pk.{what.replace(' ', '_')} wherever the {what} is sent"
        )
    return obj


class DeviceFunction:
    """A helper a kernel may call (``@pk.device_function``). It takes ``acc``, arrays, views and
    scalars, and returns one scalar, several (``return a, b``, unpacked by the caller) or
    nothing. Compiled with the kernel that calls it.

    ``min_shared`` maps array parameters to the least number of elements a shared array passed
    there must have, as a function of the block's threads (``{"ws": lambda block_threads:
    block_threads}``): checked at each launch against its work division (WorkDivError)."""

    __alpyka_device_function__ = True

    def __init__(self, fn: Callable, min_shared: dict[str, Callable[[int], int]] | None = None) -> None:
        self.min_shared = _check_min_shared(fn, min_shared or {})
        self.py_function = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.__qualname__ = getattr(fn, "__qualname__", fn.__name__)
        self.__wrapped__ = fn
        self._parsed: ParsedFunction | None = None

    def parsed(self) -> ParsedFunction:
        if self._parsed is None:
            self._parsed = parse_function(self.py_function, "device function")
        return self._parsed

    def __call__(self, *args: Any) -> Any:
        raise ArgumentTypeError(
            f"device function {self.__name__!r} can only be called from inside a kernel; launch a @pk.kernel "
            "that calls it with pk.exec (or call the undecorated function, its __wrapped__)"
        )

    def __reduce__(self) -> tuple[Callable, tuple[str, str, str]]:
        """Pickled by reference (module + qualified name): see :meth:`Kernel.__reduce__`."""
        return _reduce_by_reference(self, "device function")

    def __repr__(self) -> str:
        return f"<device_function {self.__name__}>"


class Kernel:
    """A kernel (``@pk.kernel``): launch it with ``pk.exec(q, workdiv, k, *args)`` or
    ``q.enqueue(workdiv, k, *args)``. Compiled per backend and argument signature on first use.

    What backends use of it is declared by ``portable.spi.KernelHandle``; the plans they compile
    are theirs, kept in this kernel's slots (:meth:`slot`), never read here."""

    __alpyka_kernel__ = True

    def __init__(
        self, fn: Callable, dynamic_shared_bytes: int | Callable[..., int] | None = None, fast_math: bool = False
    ) -> None:
        if not isinstance(fast_math, bool):
            raise ArgumentTypeError(f"@pk.kernel(fast_math=...) takes True or False, got {fast_math!r}")
        self.py_function = fn
        self.__name__ = fn.__name__
        self.__qualname__ = getattr(fn, "__qualname__", fn.__name__)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        self.dynamic_shared_bytes = dynamic_shared_bytes
        #: FMA contraction and relaxed IEEE rules allowed (each backend's fast math); off: numpy's bits
        self.fast_math = fast_math
        self._parsed: ParsedFunction | None = None
        self._ir: dict[tuple, ir.KernelDef] = {}
        self._ir_lock = threading.Lock()  # one build per IR key, whichever backend asks
        self._slots: dict[Hashable, Any] = {}  # owner (a backend's name) -> what it keeps here
        self._written: dict[tuple, frozenset[int]] = {}  # (signature, ndim) -> written_args

    @property
    def param_names(self) -> list[str]:
        """The parameter names after ``acc``."""
        return self.parsed().params[1:]

    def parsed(self) -> ParsedFunction:
        if self._parsed is None:
            self._parsed = parse_function(self.py_function, "kernel")
        return self._parsed

    def signature(self, args: tuple) -> tuple:
        """The signature key of a launch with ``args``."""
        return signature_key(args, self.__name__, self)

    def check_args(self, args: tuple, device: Any) -> None:
        check_args(self.__name__, self.param_names, args, device)

    def ir(self, key: tuple, ndim: int, debug: bool) -> ir.KernelDef:
        """The typed IR for a launch signature (cached; built once, whichever thread asks)."""
        k = (key, ndim, debug)
        got = self._ir.get(k)
        if got is None:
            with self._ir_lock:
                got = self._ir.get(k)
                if got is None:
                    specs = arg_specs(key, self.param_names)
                    got = build_kernel(self.parsed(), specs, ndim, debug, specialise_device_function)
                    got.fast_math = self.fast_math  # the emitters' and compilers' switch (part of every cache key)
                    if verify_enabled():  # the test suite's check of the front end (ALPYKA_VERIFY_IR)
                        verify(got, after="the front end")
                    self._ir[k] = got
        return got

    def written_args(self, args: tuple, ndim: int) -> frozenset[int]:
        """The indices of the arguments whose memory a launch with ``args`` stores to or updates
        atomically (cached per signature)."""
        k = (self.signature(args), ndim)
        got = self._written.get(k)
        if got is None:
            got = self._written[k] = written_params(self.ir(k[0], ndim, debug_enabled()))
        return got

    def synchronises_blocks(self, args: tuple, ndim: int) -> bool:
        """Whether a launch with ``args`` meets a barrier of its block (``acc.sync_block_threads``,
        a block predicate or scan, in the kernel or a device function it calls: pk.tools'
        block-level tools), which a CPU runtime runs one work-item after another."""
        kir = self.ir(self.signature(args), ndim, debug_enabled())
        bodies = [kir.body] + [fn.body for fn in kir.functions.values()]
        return any(isinstance(x, ir.BLOCK_BARRIERS) for body in bodies for x in ir.nodes(body))

    def slot(self, owner: Hashable, make: Callable[[], _T]) -> _T:
        """What ``owner`` (a backend, by its name) keeps with this kernel: made by ``make()`` on
        the first ask, the same object for every caller after (thread-safe), freed with the
        kernel. The kernel never looks inside (``portable.spi.KernelHandle``)."""
        got = self._slots.get(owner)
        if got is None:
            got = self._slots.setdefault(owner, make())
        return got

    def shared_bytes(self, workdiv: Any, args: tuple) -> int:
        """Dynamic shared memory per block (bytes) for a launch."""
        d = self.dynamic_shared_bytes
        if d is None:
            return 0
        n = d(workdiv, *args) if callable(d) else d
        if not isinstance(n, int) or n < 0:
            raise KernelArgumentError(
                f"kernel {self.__name__!r}: dynamic_shared_bytes gave {n!r}; it must give a non-negative int"
            )
        return n

    def __call__(self, *args: Any) -> Any:
        raise ArgumentTypeError(
            f"kernel {self.__name__!r} is launched with pk.exec(queue, workdiv, kernel, *args), not called"
        )

    def __reduce__(self) -> tuple[Callable, tuple[str, str, str]]:
        """Pickled by reference: the module and qualified name, imported again where it is
        unpickled (a Dask worker compiles its own plans there). A kernel of the ``__main__``
        script (unless run as ``python -m module``) or one defined inside a function cannot be
        found by name elsewhere: ``pickle.PicklingError`` says so and how to fix it."""
        return _reduce_by_reference(self, "kernel")

    def __repr__(self) -> str:
        return f"<kernel {self.__name__}>"


def kernel(
    fn: Callable | None = None, *, dynamic_shared_bytes: int | Callable[..., int] | None = None, fast_math: bool = False
) -> Any:
    """Mark ``fn(acc, *args)`` as a kernel: ``@pk.kernel`` or
    ``@pk.kernel(dynamic_shared_bytes=lambda workdiv, *args: nbytes)`` (or a fixed int).
    ``fast_math=True`` lets each backend contract ``a*b + c`` into FMAs and use its fast math
    (docs/kernels.md, "Same bits on every backend"); by default every backend gives numpy's bits."""
    if fn is None:
        return lambda f: Kernel(f, dynamic_shared_bytes, fast_math)
    if not callable(fn):
        raise ArgumentTypeError(f"@pk.kernel decorates a function, got {type(fn).__name__}: put it above a def")
    return Kernel(fn, dynamic_shared_bytes, fast_math)


def device_function(fn: Callable | None = None, *, min_shared: dict[str, Callable[[int], int]] | None = None) -> Any:
    """Mark ``fn`` as a helper kernels may call: ``@pk.device_function``, or
    ``@pk.device_function(min_shared={"ws": lambda block_threads: block_threads})`` for one
    whose shared array parameter ``ws`` needs that many elements (checked at launch)."""
    if fn is None:
        return lambda f: device_function(f, min_shared=min_shared)
    if not callable(fn):
        raise ArgumentTypeError(
            f"@pk.device_function decorates a function, got {type(fn).__name__}: put it above a def"
        )
    return DeviceFunction(fn, min_shared)


def _check_min_shared(fn: Callable, needs: dict) -> dict[str, Callable[[int], int]]:
    """``min_shared`` of a device function: parameter names (not acc) to callables."""
    if not isinstance(needs, dict):
        raise ArgumentTypeError(
            f"min_shared takes a dict {{parameter: lambda block_threads: elements}}, got {type(needs).__name__}"
        )
    code = getattr(fn, "__code__", None)
    params = list(code.co_varnames[: code.co_argcount]) if code is not None else []
    for name, rule in needs.items():
        if name not in params[1:]:
            raise ArgumentTypeError(
                f"min_shared names {name!r}, which is not a parameter of {fn.__name__!r} after acc "
                f"({', '.join(params[1:])})"
            )
        if not callable(rule):
            raise ArgumentTypeError(
                f"min_shared[{name!r}] must be a function of block_threads, got {rule!r}: e.g. lambda n: n"
            )
    return dict(needs)


def check_shared_needs(needs: list[ir.SharedNeed], workdiv: Any, kernel_name: str) -> None:
    """WorkDivError when a shared array is smaller than a device function it is passed to needs
    for ``workdiv``'s threads per block (``@pk.device_function(min_shared=...)``)."""
    if not needs:
        return
    threads = math.prod(workdiv.threads)
    for need in needs:
        want = int(need.minimum(threads))
        if need.elements < want:
            raise WorkDivError(
                f"kernel {kernel_name!r}: {need.label} has {need.elements} elements, but {need.param} needs at least "
                f"{want} with {threads} threads per block ({workdiv}); declare it with at least that many "
                f"(acc.shared_array({want}, ...)) or launch fewer threads per block"
            )


def _apply_needs(fname: str, vals: list[Any], ctx: CompileContext) -> None:
    """The shared-size needs of device function ``fname``'s array parameters, carried to the
    arrays of a call (``vals``): a kernel's shared array records an ir.SharedNeed; a parameter
    of the device function being built passes the need on to that function."""
    for (k, what), minimum in ctx.param_needs.get(fname, {}).items():
        v = vals[k]
        if not isinstance(v, ir.ArrayRef):
            continue
        owner = ctx.param_owner.get(v.name)
        if owner is not None:
            ctx.param_needs.setdefault(owner[0], {})[(owner[1], what)] = minimum
        elif v.name in ctx.shared:
            sh = ctx.shared[v.name]
            label = ctx.labels.get(v.name, v.name)
            ctx.shared_needs[(v.name, what)] = ir.SharedNeed(v.name, label, math.prod(sh.shape), what, minimum)


# ----------------------------------------------------------------------------- device functions
def _array_param(name: str, arr: ir.ArrayRef) -> ir.ArrayRef:
    ext = tuple(ir.Var(f"{name}_e{d}", INDEX) for d in range(len(arr.extents)))
    pitch = ir.Var(f"{name}_pitch", INDEX) if arr.pitch is not None else None
    return ir.ArrayRef(name, arr.type, ext, pitch)


#: what a value that a device function cannot take is, in its message
_WHAT = {
    "BuiltinVal": "a builtin or math function (wrap it in a @pk.device_function)",
    "ModuleVal": "a module",
    "DTypeVal": "a numpy type",
    "MultiCall": "several values",
    "LoopVal": "an acc loop",
    "RangeVal": "a range",
    "AccMember": "an acc member",
}


def _specialisation_keys(df: DeviceFunction, vals: list[Any], engines: set[str]) -> tuple[list[tuple], list[Any]]:
    """What a specialisation of ``df`` depends on for each argument value (acc; a scalar's type;
    an array's type, or whether it is a random engine (of ``engines``: its draws are allowed in
    the body); a view's layout and constness; the device function passed; a tuple's items'),
    and the call's IR arguments."""
    call_args: list[Any] = []

    def key(v: Any) -> tuple:
        if isinstance(v, AccVal):
            return ("acc",)
        if isinstance(v, ir.Expr):
            call_args.append(v)
            return ("scalar", v.type.name)
        if isinstance(v, ir.ArrayRef):
            call_args.append(v)
            return ("engine",) if v.name in engines else ("array", v.type)
        if isinstance(v, ViewVal):
            call_args.extend([*v.fields.values(), v.size])
            return ("view", v.layout, v.const)
        if isinstance(v, DeviceFunctionVal):  # specialised per function passed (a C++ lambda's type)
            fn = v.function
            if isinstance(fn, BoundLocal):  # a nested def: its captured values are arguments too
                return ("function", fn.template, key(TupleVal(fn.captures)))
            return ("function", fn)
        if isinstance(v, TupleVal):  # (offsets, content), *args: each item as an argument of its own
            return ("tuple", tuple(key(it) for it in v.items))
        what = _WHAT.get(type(v).__name__, type(v).__name__)
        raise ArgumentTypeError(
            f"device function {df.__name__!r} cannot take {what}; pass acc, arrays, views, numbers, "
            "tuples of those or @pk.device_function functions"
        )

    return [key(v) for v in vals], call_args


def _parameters(df: Any, parsed: ParsedFunction, vals: list[Any]) -> tuple[list[str], list[Any]]:
    """The parameter names of ``df`` and the value of each for a call with ``vals``: a ``*args``
    parameter gets the tuple of the arguments after the named ones."""
    names = list(parsed.params)
    if parsed.vararg is not None:
        if len(vals) < len(names):
            raise ArgumentTypeError(
                f"device function {df.__name__!r} takes at least {len(names)} argument(s), got {len(vals)}"
            )
        names, vals = [*names, parsed.vararg], [*vals[: len(names)], TupleVal(list(vals[len(names) :]))]
    elif len(vals) != len(names):
        raise ArgumentTypeError(f"device function {df.__name__!r} takes {len(names)} argument(s), got {len(vals)}")
    if isinstance(df, BoundLocal):  # a nested def: what it captured comes after its own parameters
        names, vals = [*names, *df.template.captured], [*vals, *df.captures]
    return names, vals


def specialise_device_function(df: DeviceFunction, vals: list[Any], ctx: CompileContext) -> tuple[str, Any, list]:
    """Build (or reuse) the IR function of ``df`` for argument values ``vals``; return its name,
    return type and the call's IR arguments."""
    parsed = df.parsed()
    names, vals = _parameters(df, parsed, vals)
    ident = df.template if isinstance(df, BoundLocal) else df  # one nested def, whatever it captured
    if any(f is ident for f in ctx.stack):
        raise ArgumentTypeError(
            f"device function {df.__name__!r} calls itself: recursion is not allowed in kernels; write it as a loop"
        )
    keys, call_args = _specialisation_keys(df, vals, ctx.engines)
    skey = (ident, tuple(keys))
    if skey in ctx.specialisations:
        fname = ctx.specialisations[skey]
        _apply_needs(fname, vals, ctx)
        return fname, ctx.functions[fname].return_type, call_args
    fname = f"df_{df.__name__}_{len(ctx.specialisations)}"
    ctx.specialisations[skey] = fname
    own = ctx.param_needs.setdefault(fname, {})
    for k, pname in enumerate(parsed.params):
        if pname in df.min_shared:
            own[(k, f"parameter {pname!r} of device function {df.__name__!r}")] = df.min_shared[pname]
    assigned_scalars: list[tuple[str, ir.Var]] = []
    params: list[Any] = []
    assigned = assigned_names(parsed.tree)
    uses_acc = False

    def bind(pn: str, pname: str, v: Any, k: int) -> Any:
        """The value parameter ``pname`` (C names ``pn...``) stands for in the body; its IR
        parameters appended to ``params``."""
        nonlocal uses_acc
        if isinstance(v, AccVal):
            uses_acc = True
            return v
        if isinstance(v, DeviceFunctionVal):  # no C parameter: its calls name the function
            fn = v.function
            if isinstance(fn, BoundLocal):  # what a nested def captured: parameters of this function
                got = bind(f"{pn}_c", f"what {fn.__name__!r} captures", TupleVal(fn.captures), k)
                return DeviceFunctionVal(BoundLocal(fn.template, got.items))
            return v
        if isinstance(v, TupleVal):
            return TupleVal([bind(f"{pn}_{j}", f"{pname}[{j}]", it, k) for j, it in enumerate(v.items)])
        if isinstance(v, ir.Expr):
            pv = ir.Var(pn, v.type)
            params.append(pv)
            return pv
        if isinstance(v, ir.ArrayRef):
            a = _array_param(pn, v)
            params.append(a)
            ctx.param_owner[pn] = (fname, k)
            ctx.labels[pn] = f"array parameter {pname!r} of device function {df.__name__!r}"
            if v.name in ctx.engines and not is_library_function(df):  # passed by reference, drawn from
                ctx.engines.add(pn)
                ctx.labels[pn] = f"random engine {pname!r} (a parameter of device function {df.__name__!r})"
            return a
        fields = {}
        for fld, arr in v.fields.items():
            a = _array_param(f"{pn}_{fld}", arr)
            params.append(a)
            fields[fld] = a
            ctx.labels[a.name] = f"field {fld!r} of view parameter {pname!r} of device function {df.__name__!r}"
        size = ir.Var(f"{pn}_size", INDEX)
        params.append(size)
        return ViewVal(v.layout, v.const, fields, size, f"view parameter {pname!r}")

    def make(var_types: dict) -> FunctionBuilder:
        bindings: dict[str, Any] = {}
        params.clear()
        assigned_scalars.clear()
        for k, (pname, v) in enumerate(zip(names, vals)):
            bound = bind(f"{fname}_p{k}", pname, v, k)
            if isinstance(bound, ir.Var) and pname in assigned:  # a scalar parameter assigned: a local
                var_types.setdefault(pname, bound.type)
                assigned_scalars.append((pname, bound))
            else:
                bindings[pname] = bound
        b = FunctionBuilder(parsed, ctx, False, bindings, var_types, [])
        b.local_prefix = f"{fname}_"
        b.prologue = [ir.Assign(b.var(n), pv) for n, pv in assigned_scalars]
        return b

    ctx.stack.append(ident)
    try:
        b, body = run_builder(make, parsed.tree.body)
    finally:
        ctx.stack.pop()
    ret = b.var_types.get("<return>", VOID)
    if ret is not VOID and not _always_returns(body):
        raise KernelSyntaxError(
            f"{parsed.filename}:{parsed.line_offset + 1}: device function {df.__name__!r} "
            "returns a value on some paths but may end without 'return value'",
            parsed.filename,
            parsed.line_offset + 1,
        )
    ctx.functions[fname] = ir.Function(
        fname, list(params), ret, b.locals, body, uses_acc, df.__name__, list(b.local_arrays.values())
    )
    _apply_needs(fname, vals, ctx)
    return fname, ret, call_args


def _always_returns(body: list[ir.Stmt]) -> bool:
    for s in body:
        if isinstance(s, ir.Return):
            return True
        if isinstance(s, ir.If) and _always_returns(s.body) and _always_returns(s.orelse):
            return True
    return False


__all__ = ["Kernel", "DeviceFunction", "kernel", "device_function", "debug_enabled", "check_shared_needs", "ScalarType"]
