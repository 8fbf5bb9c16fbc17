"""Ctrl-C stops `alpyka demo` at once: one line, no traceback, no stream left running through the
remaining events, and the process dies by SIGINT (a shell's exit status 130; a shell loop running
the demo stops too), as portable.cli.run_script's examples do (run as a subprocess, with bounded
timeouts)."""

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


def _drain(stream, sink: list[bytes]) -> None:
    """Read ``stream`` into ``sink`` chunk by chunk to its end, then close it (no ResourceWarning)."""
    with stream:
        sink.extend(iter(lambda: stream.read1(4096), b""))


class Demo:
    """``python -m portable.cli._main demo --events 100000`` (the `alpyka` script's entry point)."""

    def __init__(self, backend: str, model_dir: Path, *flags: str) -> None:
        env = {
            **os.environ,
            "ALPYKA_MODEL_DIR": str(model_dir),
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        env.pop("ALPYKA_TRACEBACK", None)
        self.p = subprocess.Popen(
            [sys.executable, "-m", "portable.cli._main", "demo", "--events", "100000", "--backend", backend, *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.out: list[bytes] = []
        self.err: list[bytes] = []
        for stream, sink in ((self.p.stdout, self.out), (self.p.stderr, self.err)):
            threading.Thread(target=_drain, args=(stream, sink), daemon=True).start()

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
    rc, took = demo.finish(timeout=30)
    err = demo.stderr()
    assert rc == -signal.SIGINT, (rc, err[-2000:])  # it exited 130: a shell loop went on
    # the events in flight end in ms and the heap is frozen for the interpreter's end: ~0.4 s idle
    # (1.2-4.5 s before, the collections at shutdown: the next test checks the freeze itself);
    # this bound only says the demo stopped, with headroom for a loaded 2-core machine (x9 at a
    # load of 18)
    assert took < 15, f"took {took:.1f} s to exit"
    assert "Traceback" not in err, err[-3000:]
    lines = [ln.strip() for ln in re.split(r"[\r\n]", err) if ln.strip()]
    assert lines[-1] == "alpyka: interrupted" and err.count("interrupted") == 1, lines[-5:]
    # no stream went on: the events done stop where the Ctrl-C found them
    assert demo.events_done() < 100000


def test_after_ctrl_c_the_interpreter_ends_without_collecting_the_heap(monkeypatch):
    """After "interrupted" the demo freezes the heap: the interpreter's end then skips its full
    garbage collections, which took 1.2-4.5 s with PyTorch and numba loaded (a faulthandler dump
    showed the main thread collecting at shutdown)."""
    import gc

    from alpyka_demo import pipeline
    from portable import cli

    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "_main", interrupted)
    monkeypatch.setattr(pipeline, "_exit_on_second_interrupt", lambda: None)
    monkeypatch.setattr(pipeline, "end_by_interrupt", lambda line: True)  # as in a program's main thread
    monkeypatch.setattr(cli, "_interrupt_said", cli._interrupt_said)  # its line, once per process
    was_enabled, frozen = gc.isenabled(), gc.get_freeze_count()
    try:
        with pytest.raises(KeyboardInterrupt):
            pipeline.main([])
        assert not gc.isenabled() and gc.get_freeze_count() > frozen
    finally:  # frozen objects stay frozen, as the suite's own (tests/conftest.py)
        if was_enabled:
            gc.enable()


def test_in_a_session_an_interrupted_demo_leaves_the_handler_and_the_collector_as_they_were(monkeypatch):
    """``pipeline.main()`` called in an interactive session (or anywhere the process goes on):
    the KeyboardInterrupt reaches the caller, the SIGINT handler is the one before the call and
    the collector stays on. Before, the demo's handler stayed (the session's next Ctrl-C ended it
    with os._exit(130)) and the heap was frozen with the collector off."""
    import gc

    from alpyka_demo import pipeline
    from portable import cli

    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "_main", interrupted)
    monkeypatch.setattr(cli, "_interactive", lambda: True)
    monkeypatch.setattr(cli, "_interrupt_said", cli._interrupt_said)
    before, frozen = signal.getsignal(signal.SIGINT), gc.get_freeze_count()
    try:
        with pytest.raises(KeyboardInterrupt):
            pipeline.main([])
        assert signal.getsignal(signal.SIGINT) is before
        assert gc.isenabled() and gc.get_freeze_count() == frozen
    finally:
        signal.signal(signal.SIGINT, before)
        gc.enable()


def test_a_second_ctrl_c_exits_at_once_without_a_traceback(demo_model_dir):
    demo = Demo("cpu_serial", demo_model_dir)
    demo.wait_until_processing()
    demo.p.send_signal(signal.SIGINT)
    time.sleep(0.05)
    if demo.p.poll() is None:
        demo.p.send_signal(signal.SIGINT)
    rc, took = demo.finish(timeout=15)
    err = demo.stderr()
    # killed by SIGINT whichever handler the second Ctrl-C found (the demo's, or the one that
    # ends an interrupted process at once); it was os._exit(130)
    assert rc == -signal.SIGINT, (rc, err[-2000:])
    assert "Traceback" not in err, err[-3000:]
    assert err.count("alpyka: interrupted") <= 1


def test_ctrl_c_waits_for_the_streams_even_when_it_lands_in_their_join(monkeypatch):
    """On Python 3.11 a KeyboardInterrupt inside ``Thread.join`` marks the joined thread as
    stopped while it still runs, so a later join returns at once; the demo then ended the
    interpreter under a stream inside PyTorch (rc 134). The streams' own completion events are
    waited for instead: when the interrupt leaves ``_run_streams``, no stream is inside an event."""
    import signal as _signal

    main = threading.main_thread().ident
    _interrupted_streams(monkeypatch, lambda: _signal.pthread_kill(main, _signal.SIGINT))


def test_a_ctrl_c_swallowed_by_a_finalizer_still_stops_the_streams(monkeypatch):
    """A KeyboardInterrupt raised while the collector runs a finalizer on the main thread is only
    printed ("Exception ignored in ..."). The CLI's handler counts the press before raising, and
    ``_run_streams`` polls that count while it waits: the demo stops as if the interrupt had
    reached it, and still waits for the streams' events."""
    from alpyka_demo import pipeline

    monkeypatch.setattr(pipeline, "_sigint_presses", 0)
    _interrupted_streams(monkeypatch, lambda: setattr(pipeline, "_sigint_presses", 1))


@pytest.mark.parametrize("handler", ["python", "cli"])
def test_a_ctrl_c_while_the_streams_start_waits_for_them_too(monkeypatch, handler):
    """A Ctrl-C that comes while ``_run_streams`` starts its threads (here: sent to the whole
    process, as a terminal does, inside the last ``Thread.start``) is deferred until they all
    run, then handled by the handler it was meant for (Python's, or the CLI's, which counts it)
    where the streams are stopped and waited for; before, it left ``_run_streams`` from
    ``Thread.start`` with the started streams going on into their events."""
    import signal as _signal

    from alpyka_demo import pipeline

    class InterruptedStart(threading.Thread):
        def start(self) -> None:
            if self.name == "stream-1":
                os.kill(os.getpid(), _signal.SIGINT)  # any thread not blocking SIGINT may get it
            super().start()

    before = _signal.getsignal(_signal.SIGINT)
    monkeypatch.setattr(pipeline, "_sigint_presses", 0)
    if handler == "cli":
        pipeline._exit_on_second_interrupt()
    installed = _signal.getsignal(_signal.SIGINT)
    try:
        monkeypatch.setattr(pipeline.threading, "Thread", InterruptedStart)
        _interrupted_streams(monkeypatch, lambda: None, slow_first=False)
        assert _signal.getsignal(_signal.SIGINT) is installed  # the deferring handler is gone
        assert pipeline._sigint_presses == (1 if handler == "cli" else 0)
    finally:
        _signal.signal(_signal.SIGINT, before)


def test_presses_counted_before_the_run_do_not_stop_it(monkeypatch):
    """The CLI's press count from an earlier, interrupted run in the same process is not a new
    Ctrl-C: the streams run to their end (here: each event fails with the streams' own error)."""
    import portable as pk
    from alpyka_demo import pipeline

    class Done(Exception):
        pass

    def quick_event(queue, model, seed, n_particles, timed, produce=None):
        if not timed:
            return None, []
        time.sleep(0.3)  # past the wait's first poll
        raise Done

    monkeypatch.setattr(pipeline, "run_event", quick_event)
    monkeypatch.setattr(pipeline, "_sigint_presses", 3)
    try:
        with pytest.raises(Done):
            pipeline._run_streams(
                pk.device("cpu_serial"), None, pipeline.Report("cpu_serial", 4, 2, "fake"), 8, progress=False
            )
    except KeyboardInterrupt:  # not pytest's own: nobody pressed anything
        pytest.fail("presses counted before the run stopped it with a KeyboardInterrupt")


def test_a_ctrl_c_during_the_warm_up_closes_the_progress_bar_first(monkeypatch):
    """The bar starts before the warm-up (compiling, deploying the model: seconds on opencl); a
    Ctrl-C there left it open, so "alpyka: interrupted" was printed on the bar's line and the bar
    was drawn again below it at the interpreter's end."""
    import portable as pk
    from alpyka_demo import pipeline

    closed = []

    class Bar:
        def close(self) -> None:
            closed.append(True)

        def update(self, n: int) -> None:
            raise AssertionError("no event ran")

    def warm_up_interrupted(queue, model, seed, n_particles, timed, produce=None):
        assert not timed, "a stream started after the interrupted warm-up"
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "_progress_bar", lambda report, progress: Bar())
    monkeypatch.setattr(pipeline, "run_event", warm_up_interrupted)
    with pytest.raises(KeyboardInterrupt):
        pipeline._run_streams(pk.device("cpu_serial"), None, pipeline.Report("cpu_serial", 4, 2, "fake"), 8, True)
    assert closed == [True]


def _interrupted_streams(monkeypatch, interrupt, slow_first: bool = True) -> None:
    """Run ``_run_streams`` on two streams whose events take 0.4 and 0.8 s; ``interrupt()`` is
    called from another thread once the first stream is inside its event and the main thread
    waits for the streams. ``_run_streams`` must raise KeyboardInterrupt with no stream left in
    an event.

    The collector is off meanwhile: a collection on the main thread runs finalizers of earlier
    tests' garbage, and a Ctrl-C landing inside one is swallowed there (seen in full runs of the
    suite with both cores busy: ``_run_streams`` ended with the streams' own exception)."""
    import gc

    import portable as pk
    from alpyka_demo import pipeline

    class Done(Exception):
        pass

    entered, sent, cancelled = threading.Event(), threading.Event(), threading.Event()
    main = threading.main_thread()

    def slow_event(queue, model, seed, n_particles, timed, produce=None):
        if not timed:  # the warm-up
            return None, []
        if slow_first and threading.current_thread().name == "stream-0":
            # the first stream (whose wait the interrupt lands in) runs its event longest: it is
            # still inside it when the interrupt comes, however loaded the machine is
            entered.set()
            sent.wait(30)
            time.sleep(0.8)
        else:
            time.sleep(0.4)
        raise Done

    def waiting_in_run_streams() -> bool:  # Condition.wait in Event.wait, called by _run_streams
        codes = [c.co_name for c in _codes(sys._current_frames().get(main.ident))]
        return codes[:3] == ["wait", "wait", "_run_streams"]

    def interrupter() -> None:
        try:
            if not entered.wait(30):
                return
            deadline = time.monotonic() + 30
            while not waiting_in_run_streams() and time.monotonic() < deadline and not cancelled.is_set():
                time.sleep(0.005)
            if not cancelled.is_set():
                interrupt()
        finally:
            sent.set()

    monkeypatch.setattr(pipeline, "run_event", slow_event)
    report = pipeline.Report("cpu_serial", 4, 2, "fake")
    killer = threading.Thread(target=interrupter, daemon=True)
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    killer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            try:
                pipeline._run_streams(pk.device("cpu_serial"), None, report, 8, progress=False)
            except Done:  # the streams ended with no KeyboardInterrupt: say what the signal met
                import signal as _signal

                pytest.fail(
                    f"no KeyboardInterrupt reached _run_streams (interrupt sent: {sent.is_set()}, "
                    f"SIGINT handler {_signal.getsignal(_signal.SIGINT)!r}, main thread "
                    f"{_signal_state()})"
                )
    finally:
        if was_enabled:
            gc.enable()
        cancelled.set()  # an early failure: the interrupting thread ends without interrupting
        entered.set()
        killer.join(40)
    in_events = [
        t
        for t, f in sys._current_frames().items()
        if any(code.co_name in ("stream_events", "slow_event") for code in _codes(f))
    ]
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


@pytest.mark.parametrize("started", [True, False])
def test_ctrl_c_says_at_once_that_the_started_server_stops(monkeypatch, capsys, started):
    """``--remote auto``: after Ctrl-C the demo stopped its Triton server for seconds in silence;
    it says so first (only for a server it started, not for one the user named)."""
    from alpyka_demo import pipeline

    class Remote:  # a RemoteModel's surface: the server it started, or None; the one it calls
        fallback_server = object() if started else None
        server = object()
        closed = False

        def close(self):
            assert capsys.readouterr().err.count("stopping the Triton server") == int(started)
            Remote.closed = True

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "load_model", lambda *a: (Remote(), "remote"))
    monkeypatch.setattr(pipeline, "_run_streams", interrupted)
    with pytest.raises(KeyboardInterrupt):
        pipeline.run("cpu_serial", 1, 1, remote="auto")
    assert Remote.closed
