"""Statistics of remote inference: what the client sent and what the server executed."""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class ServerStatistics:
    """Triton's per-model counters (``ModelStatistics``), cumulative since the model loaded.

    ``requests`` counts successful requests, ``inferences`` the samples they carried (batch
    rows), ``executions`` the model runs; dynamic batching shows as ``executions < requests``.
    Times are totals in nanoseconds over all requests.
    """

    requests: int = 0
    failures: int = 0
    inferences: int = 0
    executions: int = 0
    queue_ns: int = 0
    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0
    batch_sizes: dict[int, int] = field(default_factory=dict)  # executed batch size -> runs

    @classmethod
    def from_triton(cls, stats: dict[str, Any]) -> ServerStatistics:
        inf = stats.get("inference_stats", {})

        def ns(key: str) -> int:
            return int(inf.get(key, {}).get("ns", 0) or 0)

        batches = {}
        for b in stats.get("batch_stats", []):
            batches[int(b.get("batch_size", 0))] = int(b.get("compute_infer", {}).get("count", 0) or 0)
        return cls(
            requests=int(inf.get("success", {}).get("count", 0) or 0),
            failures=int(inf.get("fail", {}).get("count", 0) or 0),
            inferences=int(stats.get("inference_count", 0) or 0),
            executions=int(stats.get("execution_count", 0) or 0),
            queue_ns=ns("queue"),
            compute_input_ns=ns("compute_input"),
            compute_infer_ns=ns("compute_infer"),
            compute_output_ns=ns("compute_output"),
            batch_sizes=batches,
        )

    @property
    def mean_executed_batch(self) -> float:
        """Samples per model execution (server-side batch)."""
        return self.inferences / self.executions if self.executions else 0.0

    @property
    def mean_request_batch(self) -> float:
        """Samples per request (client-side batch)."""
        return self.inferences / self.requests if self.requests else 0.0

    @property
    def mean_queue_us(self) -> float:
        return self.queue_ns / self.requests / 1e3 if self.requests else 0.0

    @property
    def mean_compute_us(self) -> float:
        total = self.compute_input_ns + self.compute_infer_ns + self.compute_output_ns
        return total / self.requests / 1e3 if self.requests else 0.0

    def minus(self, before: ServerStatistics) -> ServerStatistics:
        """The counters accumulated since ``before`` (same server and model)."""
        keys = (
            "requests",
            "failures",
            "inferences",
            "executions",
            "queue_ns",
            "compute_input_ns",
            "compute_infer_ns",
            "compute_output_ns",
        )
        diff = {k: getattr(self, k) - getattr(before, k) for k in keys}
        sizes = {b: n - before.batch_sizes.get(b, 0) for b, n in self.batch_sizes.items()}
        return ServerStatistics(**diff, batch_sizes={b: n for b, n in sizes.items() if n})


@dataclass
class ClientStatistics:
    """What this client did: events forwarded, requests sent, retries, failovers, failures."""

    events: int = 0
    requests: int = 0
    retries: int = 0
    failovers: int = 0
    timeouts: int = 0
    failures: int = 0
    shm_requests: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    latency_s: float = 0.0  # summed over successful requests (send to response)

    @property
    def mean_latency_ms(self) -> float:
        return self.latency_s / self.requests * 1e3 if self.requests else 0.0


class _ClientCounters:
    """Thread-safe accumulation of :class:`ClientStatistics`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats = ClientStatistics()

    def add(self, **deltas: float) -> None:
        with self._lock:
            for k, v in deltas.items():
                setattr(self._stats, k, getattr(self._stats, k) + v)

    def snapshot(self) -> ClientStatistics:
        with self._lock:
            return ClientStatistics(**asdict(self._stats))


@dataclass
class RemoteStatistics:
    """``RemoteModel.statistics()``: the client's counters and the current server's."""

    url: str
    model: str
    client: ClientStatistics
    server: ServerStatistics | None  # None: the server could not be asked (``server_error`` says why)
    server_error: str = ""

    def __str__(self) -> str:
        c, s = self.client, self.server
        head = (
            f"{self.model} @ {self.url}: client {c.events} events in {c.requests} requests "
            f"({c.retries} retries, {c.failovers} failovers, {c.mean_latency_ms:.2f} ms mean); "
        )
        if s is None:
            return head + f"server counters unavailable ({self.server_error})"
        return (
            head + f"server {s.requests} requests, {s.inferences} inferences in {s.executions} "
            f"executions (mean batch {s.mean_executed_batch:.1f}), queue "
            f"{s.mean_queue_us:.0f} us, compute {s.mean_compute_us:.0f} us per request"
        )
