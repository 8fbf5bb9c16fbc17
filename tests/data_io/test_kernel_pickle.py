"""``pk.kernel`` and ``pk.device_function`` objects pickle by reference (module + qualified name):
a round trip gives the same object back, another process re-imports it and launches it, and a
kernel that cannot be found by name (``__main__`` script, defined in a function, name rebound)
is a clear ``PicklingError``. A Dask run takes a kernel as an argument; the embedded cluster's
workers get a thread budget and no ``MALLOC_TRIM_THRESHOLD_``."""

import os
import pickle
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest

import portable as pk
from alpyka_testing.errors import raises_type, raises_value

REPO = Path(__file__).resolve().parents[2]


@pk.device_function
def twice(x):
    return 2.0 * x


@pk.kernel
def scale_twice(acc, a, n):
    for i in acc.uniform_elements(n):
        a[i] = twice(a[i])


def _run_scale(kernel, values: np.ndarray) -> np.ndarray:
    """``kernel(a, n)`` on cpu_serial over a copy of ``values``; returns the result."""
    q = pk.Queue(pk.device("cpu_serial"))
    buf = pk.Buffer(q.device, values.shape, values.dtype)
    pk.memcpy(q, buf, np.ascontiguousarray(values))
    pk.exec(q, pk.make_workdiv(q.device, 1, 64), kernel, buf, values.size)
    out = np.empty(values.shape, values.dtype)
    pk.memcpy(q, out, buf)
    q.wait()
    return out


# ---------------------------------------------------------------------- in process
@pytest.mark.parametrize("protocol", [0, 2, pickle.HIGHEST_PROTOCOL])
def test_round_trip_is_the_same_object(protocol):
    assert pickle.loads(pickle.dumps(scale_twice, protocol=protocol)) is scale_twice
    assert pickle.loads(pickle.dumps(twice, protocol=protocol)) is twice
    # inside containers too (what Dask sends: tasks with kernels among their arguments)
    k, args = pickle.loads(pickle.dumps((scale_twice, {"n": 3})))
    assert k is scale_twice and args == {"n": 3}


def test_round_trip_after_launch_keeps_working():
    x = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(_run_scale(scale_twice, x), 2 * x)  # compiled plans exist now
    again = pickle.loads(pickle.dumps(scale_twice))
    np.testing.assert_array_equal(_run_scale(again, x), 2 * x)


def test_cloudpickle_by_value_module_still_sends_kernels_by_reference():
    cloudpickle = pytest.importorskip("cloudpickle")
    me = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(me)  # what pk.distributed does for test and script modules
    try:
        assert cloudpickle.loads(cloudpickle.dumps(scale_twice)) is scale_twice
    finally:
        cloudpickle.unregister_pickle_by_value(me)


def test_kernel_defined_in_a_function_is_a_clear_error():
    @pk.kernel
    def inner(acc, a, n):
        for i in acc.uniform_elements(n):
            a[i] = 0.0

    with pytest.raises(
        pickle.PicklingError,
        match=r"kernel 'inner' .*defined inside a function; define it at "
        r"the top level of a module",
    ):
        pickle.dumps(inner)


def _fake_main(monkeypatch, spec_name):
    """A ``__main__`` module (a script, or ``python -m spec_name``) holding a kernel ``main_kernel``."""
    main = types.ModuleType("__main__")
    main.__spec__ = None if spec_name is None else types.SimpleNamespace(name=spec_name)

    def main_kernel(acc, a, n):
        pass

    main_kernel.__module__ = "__main__"
    main_kernel.__qualname__ = "main_kernel"
    main.main_kernel = pk.kernel(main_kernel)
    monkeypatch.setitem(sys.modules, "__main__", main)
    return main.main_kernel


def test_kernel_of_a_main_script_is_a_clear_error(monkeypatch):
    k = _fake_main(monkeypatch, None)
    with pytest.raises(
        pickle.PicklingError,
        match=r"'main_kernel' \(__main__.main_kernel\): it is defined in the "
        r"__main__ script",
    ):
        pickle.dumps(k)


def test_kernel_of_a_module_run_with_dash_m_goes_by_its_module_name(monkeypatch):
    k = _fake_main(monkeypatch, "mypkg.analysis")
    func, args = k.__reduce__()
    assert args == ("kernel", "mypkg.analysis", "main_kernel")
    with pytest.raises(
        ImportError,
        match=r"cannot unpickle kernel mypkg.analysis.main_kernel: "
        r"ModuleNotFoundError.*must be importable here",
    ):
        func(*args)  # this process has no mypkg: the receiving side's error names the module


def test_rebound_name_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "scale_twice", "something else")
    with pytest.raises(pickle.PicklingError, match=r"test_kernel_pickle.scale_twice is a different object"):
        pickle.dumps(scale_twice_ref)


scale_twice_ref = scale_twice  # the same kernel under a second name, for the test above


def test_unpickling_a_name_that_is_not_a_kernel_is_a_clear_error():
    func, (what, module, qualname) = scale_twice.__reduce__()
    with raises_type(r"that name is <function _run_scale .*not a kernel; the module must define it with @pk\.kernel"):
        func(what, module, "_run_scale")


# ---------------------------------------------------------------------- another process
def _write_module(tmp_path: Path) -> Path:
    (tmp_path / "pickle_kernels.py").write_text(
        textwrap.dedent("""
        import portable as pk

        @pk.kernel
        def add_one(acc, a, n):
            for i in acc.uniform_elements(n):
                a[i] = a[i] + 1.0
    """)
    )
    return tmp_path


def _python(code: str, path: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *path])}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_another_process_imports_and_launches_it(tmp_path):
    where = str(_write_module(tmp_path))
    dumped = tmp_path / "k.pickle"
    make = f"import pickle, pickle_kernels; open({str(dumped)!r}, 'wb').write(pickle.dumps(pickle_kernels.add_one))"
    assert _python(make, [where]).returncode == 0
    use = textwrap.dedent(f"""
        import pickle, sys, numpy as np, portable as pk
        k = pickle.loads(open({str(dumped)!r}, 'rb').read())
        q = pk.Queue(pk.device("cpu_serial"))
        buf = pk.Buffer(q.device, (4,), np.float32)
        pk.memcpy(q, buf, np.arange(4, dtype=np.float32))
        pk.exec(q, pk.make_workdiv(q.device, 1, 64), k, buf, 4)
        out = np.empty(4, np.float32); pk.memcpy(q, out, buf); q.wait()
        print(k.__module__ if hasattr(k, '__module__') else '', out.tolist())
    """)
    ok = _python(use, [where])
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert ok.stdout.split(" ", 1)[1].strip() == "[1.0, 2.0, 3.0, 4.0]", ok.stdout  # the values, as Python floats
    missing = _python(f"import pickle; pickle.loads(open({str(dumped)!r}, 'rb').read())", [])
    assert missing.returncode != 0
    assert (
        "cannot unpickle kernel pickle_kernels.add_one: ModuleNotFoundError: No module named 'pickle_kernels'; "
        "the module must be importable here"
    ) in missing.stderr


# ---------------------------------------------------------------------- Dask
def one_torch_thread(device):
    """A worker's setup: torch's policy set in the setup thread (as alpyka's Model does)."""
    import torch

    torch.set_num_threads(1)
    return device


def run_kernel_chunk(state, chunk):
    """A Dask task: launch the kernel it was given on this worker's device; report the worker's
    environment (thread budget, malloc setting, torch threads in this task thread) beside the result."""
    kernel, values = chunk
    import numba
    import torch

    env = {k: os.environ.get(k) for k in ("MALLOC_TRIM_THRESHOLD_", "NUMBA_NUM_THREADS", "OMP_NUM_THREADS")}
    torch_threads = torch.get_num_threads()  # first: starting numba's OpenMP pool (numba.get_num_threads)
    # sets this thread's OpenMP count, which torch shares, to NUMBA_NUM_THREADS
    return _run_scale(kernel, values), os.getpid(), env, numba.get_num_threads(), torch_threads


def test_dask_run_with_a_kernel_as_argument():
    pytest.importorskip("distributed", reason="the data extra: pip install 'alpyka[data]'")
    pytest.importorskip("torch")
    before = {
        k: os.environ.get(k)
        for k in ("MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "PYTHONHASHSEED")
    }
    chunks = [(scale_twice, np.full(3, i, np.float32)) for i in range(3)]
    out = pk.distributed.run(
        run_kernel_chunk, chunks, setup=one_torch_thread, workers=1, backend="cpu_serial", timeout=90
    )
    for i, (values, pid, env, numba_threads, torch_threads) in enumerate(out):
        assert torch_threads == 1, "the task thread does not use the torch threads its setup chose"
        np.testing.assert_array_equal(values, np.full(3, 2 * i, np.float32))
        assert pid != os.getpid()
        budget = str(pk.distributed.worker_environment(1)["NUMBA_NUM_THREADS"])
        if before["NUMBA_NUM_THREADS"] is None:  # otherwise the environment's own setting wins
            assert env["NUMBA_NUM_THREADS"] == budget and numba_threads == int(budget)
        if before["MALLOC_TRIM_THRESHOLD_"] is None:
            assert env["MALLOC_TRIM_THRESHOLD_"] is None, "Dask's malloc trim setting reached the worker"
    # what Dask's Nanny wrote into this process's environment to spawn the worker is put back
    assert {k: os.environ.get(k) for k in before} == before


def test_worker_environment_budget():
    cores = len(os.sched_getaffinity(0))
    env = pk.distributed.worker_environment(2)
    assert env["MALLOC_TRIM_THRESHOLD_"] is None
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
        assert env[key] == str(max(1, cores // 2))
    assert pk.distributed.worker_environment(10 * cores)["NUMBA_NUM_THREADS"] == "1"
    for bad in (0, -1, 1.5, True):
        with raises_value(r"workers must be a positive integer \(1, 2, \.\.\.\)"):
            pk.distributed.worker_environment(bad)
