"""The service's Prometheus metrics (prometheus-client), served at GET /metrics.

Each app has its own `CollectorRegistry`, not the process-wide default: two apps in one process
(tests, or a server that reloads) would otherwise collide on metric names. Names start with
`interlingua_`; durations are in seconds, as Prometheus wants.
"""
from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from interlingua.serving.batcher import BatchRun

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_TEXT_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
BATCH_TOKEN_BUCKETS = (16, 64, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
CONTENT_TYPE = CONTENT_TYPE_LATEST


class ServiceMetrics:
    """The metrics of one app and the calls that feed them."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("interlingua_requests", "HTTP requests answered, by endpoint and status code",
                                ["endpoint", "status"], registry=r)
        self.request_seconds = Histogram("interlingua_request_duration_seconds", "Time from a request's arrival "
                                         "to its answer (X-Total-Time)", ["endpoint"], buckets=LATENCY_BUCKETS_S,
                                         registry=r)
        self.queue_seconds = Histogram("interlingua_queue_duration_seconds", "Time a model request waited in the "
                                       "batcher's queue (X-Queue-Time)", ["endpoint"], buckets=LATENCY_BUCKETS_S,
                                       registry=r)
        self.inference_seconds = Histogram("interlingua_inference_duration_seconds", "Time of the model calls that "
                                           "answered a request (X-Inference-Time)", ["endpoint"],
                                           buckets=LATENCY_BUCKETS_S, registry=r)
        self.queue_depth = Gauge("interlingua_queue_depth", "Requests waiting in the batcher for a model call",
                                 registry=r)
        self.in_flight = Gauge("interlingua_requests_in_flight", "Model requests being answered (what "
                               "--max-concurrent-requests bounds)", registry=r)
        self.batch_size = Histogram("interlingua_batch_size", "Texts per model call", buckets=BATCH_TEXT_BUCKETS,
                                    registry=r)
        self.batch_tokens = Histogram("interlingua_batch_tokens", "Estimated subwords per model call (what "
                                      "--max-batch-tokens bounds)", buckets=BATCH_TOKEN_BUCKETS, registry=r)

    def watch(self, queued: Callable[[], int], in_flight: Callable[[], int]) -> None:
        """Read the two gauges from the batcher and the admission counter at each scrape."""
        self.queue_depth.set_function(queued)
        self.in_flight.set_function(in_flight)

    def batch(self, run: BatchRun) -> None:
        """The batcher's `on_batch`: one model call."""
        self.batch_size.observe(run.texts)
        self.batch_tokens.observe(run.tokens)

    def request(self, endpoint: str, status: int, total_s: float, model: tuple[float, float] | None) -> None:
        """One answered request; `model` is (queue seconds, inference seconds) for a model request."""
        self.requests.labels(endpoint, str(status)).inc()
        self.request_seconds.labels(endpoint).observe(total_s)
        if model is not None:
            self.queue_seconds.labels(endpoint).observe(model[0])
            self.inference_seconds.labels(endpoint).observe(model[1])

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric."""
        return generate_latest(self.registry)
