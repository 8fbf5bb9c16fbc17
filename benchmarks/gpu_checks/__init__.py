"""Checks for a lent GPU that benchmarks/gpu_check.py runs: ``CHECKS`` maps a name to
``fn(queue, dry_run) -> dict`` (a boolean ``passed`` and figures)."""

from __future__ import annotations

from .stream_handoffs import from_dlpack_after_long_kernel, write_outputs_after_sleep

CHECKS = {
    "write_outputs_after_sleep": write_outputs_after_sleep,
    "from_dlpack_after_long_kernel": from_dlpack_after_long_kernel,
}
