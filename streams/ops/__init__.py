"""What a running worker says about itself: metrics, health, stalls and logs.

- `metrics`: the Prometheus metrics of a worker, on an injectable registry.
- `health`: liveness and readiness (`/healthz`, `/readyz`) and the consumer-lag probe.
- `stalls`: how long the event loop is held (loop lag, collector pauses, state-cache misses).
- `stall_watch`: what ran while the loop stalled, sampled from a thread of its own.
- `logs`: JSON or text log lines.

Every layer above the wire may report through these; they import only the core, the settings
and the wire.
"""
