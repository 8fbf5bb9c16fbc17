"""The stream hand-offs at the torch and DLPack boundaries on a real GPU, for
benchmarks/gpu_check.py: each check is ``fn(queue, dry_run) -> dict`` with a boolean ``passed``.

- :func:`write_outputs_after_sleep`: a tensor made on torch's current stream behind
  ``torch.cuda._sleep`` handed to ``SoAMetadata.write_outputs(..., queue=q)`` (the queue's
  stream must wait for torch's), and one handed over while the queue's stream sleeps, dropped at
  once and its memory asked for again on torch's stream and filled with junk (``record_stream``
  must keep it from being reused under the queued copy): the collection holds the values;
- :func:`from_dlpack_after_long_kernel`: ``torch.from_dlpack(buf)`` and ``cupy.asarray(buf)``
  (the CUDA array interface, v3 ``stream``) right after a long alpyka kernel, read at once on
  torch's (cupy's) current stream: they must see the kernel's results.

``dry_run`` (the GPU emulator, ALPYKA_EMULATE=cuda, torch without CUDA): tiny sizes, torch's
CUDA device and streams routed onto the emulator as the test suite does
(alpyka_testing/backends/standin_torch.py); the emulator has no ``torch.cuda._sleep``, so the dry
run checks the values and the stream waits alpyka asked for instead of a race.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

import portable as pk
from alpyka_testing import stream_cases

#: per-thread length of the dependent multiply-add chain of the long kernel (GPU: ~0.1 s)
GPU_REPS, DRY_REPS = 20_000_000, 1_000
GPU_N, DRY_N = 1 << 20, 64
#: torch.cuda._sleep cycles (~2 GHz clocks: ~0.1 s)
SLEEP_CYCLES = 200_000_000


@contextlib.contextmanager
def _torch_for(dry_run: bool) -> Iterator[Any]:
    """torch, with its CUDA device and streams on the emulator under ``dry_run``; yields the
    stand-in's stream recorder there (None on a GPU)."""
    if not dry_run:
        yield None
        return
    import pytest

    import inference  # noqa: F401 - the modules patch_torch patches
    from alpyka_testing.backends.standin_torch import patch_torch

    with pytest.MonkeyPatch.context() as mp:
        yield patch_torch(mp)


def _write_case(queue: pk.Queue, n: int, case: str, dry_run: bool) -> dict:
    """One ``write_outputs(..., queue=q)`` of values torch made on its current stream:

    - ``"producer_late"``: torch's stream sleeps, then computes the values (into memory holding
      -1): the queue's copy must wait for that stream;
    - ``"reused_early"``: the queue's stream sleeps (the copy waits behind it); the caller drops
      the values at once and torch's next allocation of that size is filled with -7 on torch's
      stream: ``record_stream`` must keep the values' memory from being handed out again before
      the copy ran."""
    import torch

    from alpyka_testing.inference import Preds
    from inference import SoAMetadata
    from inference._torch_queue import torch_device

    out = pk.PortableCollection(Preds, n, queue)
    pk.memset(queue, out, 0)
    queue.wait()
    meta = SoAMetadata(out).append_block("preds", "m", "n")
    meta.device_tensor("preds")  # made now: its making must not synchronise anything below
    want = (torch.arange(2 * n, dtype=torch.float32) * 0.5 + 1.0).reshape(n, 2)
    t0 = time.perf_counter()
    if dry_run:
        meta.write_outputs({"preds": want.clone()}, queue=queue)
    else:
        dev = torch_device(queue.device)
        want_dev = want.to(dev)
        torch.cuda.synchronize(dev)
        junk = torch.full((n, 2), -1.0, device=dev)  # the block the values get next: -1 in it
        del junk
        if case == "producer_late":
            torch.cuda._sleep(SLEEP_CYCLES)
        else:
            with torch.cuda.stream(torch.cuda.ExternalStream(queue.native_handle, device=dev)):
                torch.cuda._sleep(SLEEP_CYCLES)
        values = want_dev * 1.0  # on torch's current stream, into the -1 block
        meta.write_outputs({"preds": values}, queue=queue)
        del values  # the caller drops it while the copy may still be queued
        junk = torch.full((n, 2), -7.0, device=dev)  # torch's next block of that size, at once
    returned_s = time.perf_counter() - t0
    cols = out.to_dict(queue)
    got = np.stack([cols["m"], cols["n"]], 1)
    wrong = int((got != want.numpy()).any(axis=1).sum())
    return {"passed": wrong == 0, "rows": n, "wrong_rows": wrong, "write_outputs_returned_s": round(returned_s, 4)}


def write_outputs_after_sleep(queue: pk.Queue, dry_run: bool) -> dict:
    n = DRY_N if dry_run else GPU_N
    with _torch_for(dry_run) as recorder:
        parts = {case: _write_case(queue, n, case, dry_run) for case in ("producer_late", "reused_early")}
        result = {"passed": all(p["passed"] for p in parts.values()), **parts}
        if recorder is not None:  # the emulator: the waits alpyka asked torch for (one per write)
            handle = int(queue.native_handle)
            result["stream_waits"] = [list(w) for w in recorder.stream_waits]
            result["passed"] = result["passed"] and recorder.stream_waits == [(handle, 0)] * 2
        return result


def from_dlpack_after_long_kernel(queue: pk.Queue, dry_run: bool) -> dict:
    import torch

    n, reps = (DRY_N, DRY_REPS) if dry_run else (GPU_N, GPU_REPS)
    want = stream_cases.expected(n)
    parts = {}
    for how in ("dlpack", "cuda_array_interface"):
        if how == "cuda_array_interface" and (dry_run or queue.device.backend_name != "cuda"):
            continue  # the emulator's cupy is not importable as cupy; cupy on HIP has no CAI
        out = pk.Buffer(queue.device, (n,), np.float32)
        sink = pk.Buffer(queue.device, (n,), np.float64)
        pk.memset(queue, out, 0)
        queue.wait()
        t0 = time.perf_counter()
        stream_cases.launch_slow_fill(queue, out, sink, reps, n)
        if how == "dlpack":
            t = torch.from_dlpack(out)  # torch passes its current stream
            handed_s = time.perf_counter() - t0
            got = t.clone().cpu().numpy()  # read on torch's stream, at once
        else:
            import cupy

            arr = cupy.asarray(out)  # CAI v3: cupy synchronises on the `stream` alpyka names
            handed_s = time.perf_counter() - t0
            got = cupy.asnumpy(arr.copy())  # read on cupy's current stream, at once
        kernel_s = time.perf_counter() - t0
        queue.wait()
        wrong = int((got != want).sum())
        parts[how] = {
            "passed": wrong == 0,
            "wrong": wrong,
            "hand_off_s": round(handed_s, 4),
            "read_done_s": round(kernel_s, 4),
        }
    return {"passed": all(p["passed"] for p in parts.values()), **parts}
