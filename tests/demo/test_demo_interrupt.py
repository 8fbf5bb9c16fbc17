"""Ctrl-C stops `alpyka demo` at once: exit status 130, one line, no traceback, no stream left
running through the remaining events (run as a subprocess, with bounded timeouts)."""

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the demo needs torch (pip install -e '.[torch]')")

ROOT = Path(__file__).resolve().parents[2]
#: events done, as the progress bar shows them ("cpu_serial x2:  1%|   | 1032/100000 [...")
PROGRESS = re.compile(r"\|\s*(\d+)/100000\b")


class Demo:
    """``python -m portable._cli demo --events 100000`` (the `alpyka` script's entry point)."""

    def __init__(self, backend: str, model_dir: Path, *flags: str) -> None:
        env = {**os.environ, "ALPYKA_MODEL_DIR": str(model_dir),
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        env.pop("ALPYKA_TRACEBACK", None)
        self.p = subprocess.Popen([sys.executable, "-m", "portable._cli", "demo", "--events", "100000",
                                   "--backend", backend, *flags],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.out: list[bytes] = []
        self.err: list[bytes] = []
        for stream, sink in ((self.p.stdout, self.out), (self.p.stderr, self.err)):
            threading.Thread(target=lambda st=stream, sk=sink: sk.extend(iter(lambda: st.read1(4096), b"")),
                             daemon=True).start()

    def stderr(self) -> str:
        return b"".join(self.err).decode(errors="replace")

    def events_done(self) -> int:
        found = PROGRESS.findall(self.stderr())
        return int(found[-1]) if found else 0

    def wait_until_processing(self, events: int = 20, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while self.events_done() < events:
            if self.p.poll() is not None or time.monotonic() > deadline:
                self.p.kill()
                pytest.fail(f"the demo did not start processing events:\n{self.stderr()[-3000:]}")
            time.sleep(0.1)

    def finish(self, timeout: float) -> tuple[int, float]:
        t0 = time.monotonic()
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            done = self.events_done()
            self.p.kill()
            self.p.wait()
            pytest.fail(f"still running {timeout} s after Ctrl-C ({done} events done):\n{self.stderr()[-2000:]}")
        took = time.monotonic() - t0
        time.sleep(0.2)  # the readers reach the end of the pipes
        return rc, took


@pytest.mark.alpyka_backends("cpu_serial", "cpu_threads", "opencl")
def test_ctrl_c_stops_the_demo(backend, demo_model_dir):
    demo = Demo(backend, demo_model_dir)
    demo.wait_until_processing()
    demo.p.send_signal(signal.SIGINT)
    rc, took = demo.finish(timeout=15)
    err = demo.stderr()
    assert rc == 130, (rc, err[-2000:])
    assert took < 10, f"took {took:.1f} s to exit"
    assert "Traceback" not in err, err[-3000:]
    lines = [ln.strip() for ln in re.split(r"[\r\n]", err) if ln.strip()]
    assert lines[-1] == "alpyka: interrupted" and err.count("interrupted") == 1, lines[-5:]
    # no stream went on: the events done stop where the Ctrl-C found them
    assert demo.events_done() < 100000


def test_a_second_ctrl_c_exits_at_once_without_a_traceback(demo_model_dir):
    demo = Demo("cpu_serial", demo_model_dir)
    demo.wait_until_processing()
    demo.p.send_signal(signal.SIGINT)
    time.sleep(0.05)
    if demo.p.poll() is None:
        demo.p.send_signal(signal.SIGINT)
    rc, took = demo.finish(timeout=15)
    err = demo.stderr()
    # 130, or killed by the second SIGINT if it came once the interpreter, finalising, had put
    # the default handler back (a shell reports that as 130 too)
    assert rc in (130, -signal.SIGINT), (rc, err[-2000:])
    assert "Traceback" not in err, err[-3000:]
    assert err.count("alpyka: interrupted") <= 1


def test_ctrl_c_waits_for_the_streams_even_when_it_lands_in_their_join(monkeypatch):
    """On Python 3.11 a KeyboardInterrupt inside ``Thread.join`` marks the joined thread as
    stopped while it still runs, so a later join returns at once; the demo then ended the
    interpreter under a stream inside PyTorch (rc 134). The streams' own completion events are
    waited for instead: when the interrupt leaves ``_run_streams``, no stream is inside an event."""
    import signal as _signal

    import portable as pk
    from inference.demo import pipeline

    class Done(Exception):
        pass

    entered, sent, cancelled = threading.Event(), threading.Event(), threading.Event()

    def slow_event(queue, model, seed, n_particles, timed, produce=None):
        if not timed:  # the warm-up
            return None, []
        if threading.current_thread().name == "stream-0":
            # the first stream (whose join the Ctrl-C lands in) runs its event longest: it is
            # still inside it when the Ctrl-C is sent, however loaded the machine is
            entered.set()
            sent.wait(30)
            time.sleep(0.8)
        else:
            time.sleep(0.4)
        raise Done

    def interrupt() -> None:  # once the streams run their events, and the main thread waits on them
        if entered.wait(30) and not cancelled.is_set():
            time.sleep(0.2)
            if not cancelled.is_set():
                _signal.pthread_kill(main, _signal.SIGINT)
        sent.set()

    monkeypatch.setattr(pipeline, "run_event", slow_event)
    report = pipeline.Report("cpu_serial", 4, 2, "fake")
    main = threading.main_thread().ident
    killer = threading.Thread(target=interrupt, daemon=True)
    killer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            try:
                pipeline._run_streams(pk.device("cpu_serial"), None, report, 8, progress=False)
            except Done:  # the streams ended with no KeyboardInterrupt: say what the signal met
                pytest.fail(f"no KeyboardInterrupt reached _run_streams (signal sent: {sent.is_set()}, "
                            f"SIGINT handler {_signal.getsignal(_signal.SIGINT)!r}, main thread "
                            f"{_signal_state()})")
    finally:
        cancelled.set()  # an early failure: the interrupting thread ends without sending its signal
        entered.set()
        killer.join(40)
    in_events = [t for t, f in sys._current_frames().items()
                 if any(code.co_name in ("stream_events", "slow_event")
                        for code in _codes(f))]
    assert not in_events, "a stream still runs an event after the Ctrl-C left _run_streams"
    assert not pipeline._streams_left_running


def _signal_state() -> str:
    """The main thread's blocked and pending signal masks (Linux), for a failure's message."""
    try:
        with open(f"/proc/self/task/{threading.main_thread().native_id}/status") as fh:
            return ", ".join(line.strip() for line in fh if line.startswith(("SigBlk", "SigPnd", "ShdPnd")))
    except OSError as exc:
        return f"masks unreadable ({exc})"


def _codes(frame):
    while frame is not None:
        yield frame.f_code
        frame = frame.f_back
