"""What a config's limits add up to at worst, against ``[budget] memory_bytes``.

Each bounded part of the daemon, at its limit, times what one unit of it was measured
to cost (docs/SECURITY.md, "What the limits add up to", has the measurements). All of
them at once is the worst a set of clients can cause: `wtwind --check` refuses a config
whose sum is over its budget (daemon/preflight.py), and `tests/test_memory_sum.py` holds
the shipped defaults under the 2 GiB default.
"""

from __future__ import annotations

from .config import DaemonConfig
from .emitter_link import MAX_NACKS
from .frame_backlog import MAX_EVENTS
from .inbound import rcvhwm
from .scalars import MAX_SERIES

MB = 10**6
PROCESS = 70 * MB            # the interpreter, the libraries, an idle daemon (RSS)
RUN = 145_000                # a run at the per-run limits: 16 KiB config, 64 emitter ids, free text
REFERENCE_POINT = 211        # a reference curve's point held (the curve and the tracker's copies)
SERIES_UNIT = 116_000        # a scalar series, or half a run's time and memory series
PARKED_EVENT = 600           # a decoded event held by a frame's rest (a dict)
HELD_ALERTS = 2 * MB         # alerts waiting for a full disk (1,000)
NACK = 150                   # a nack pacing entry
PEER_BUCKETS = 1 * MB        # the peer buckets (4,096)


def parts(cfg: DaemonConfig) -> list[tuple[str, int]]:
    """(part, bytes at worst) for each bounded part."""
    listen, runs = cfg.listen, cfg.runs
    return [
        ("process", PROCESS),
        ("run table ([runs] max_runs)", runs.max_runs * RUN),
        ("reference curves ([runs] max_reference_points)", runs.max_reference_points * REFERENCE_POINT),
        ("scalar and timing series (2,048)", MAX_SERIES * SERIES_UNIT),
        ("socket queues ([listen] queue_bytes, for max_connections)",
         listen.max_connections * rcvhwm(listen) * listen.max_frame_bytes),
        ("frames waiting behind a cut one (queue_bytes / 4)", listen.queue_bytes // 4),
        ("events of the frames cut short (50,000)", MAX_EVENTS * PARKED_EVENT),
        ("alerts held, nacks, peer buckets", HELD_ALERTS + MAX_NACKS * NACK + PEER_BUCKETS),
    ]


def total(cfg: DaemonConfig) -> int:
    return sum(size for _, size in parts(cfg))


def over_budget(cfg: DaemonConfig) -> str | None:
    """A sentence when the limits add up to more than the budget, else None."""
    worst, budget = total(cfg), cfg.budget.memory_bytes
    if worst <= budget:
        return None
    largest = ", ".join(f"{name} {size / MB:,.0f} MB" for name, size in
                        sorted(parts(cfg), key=lambda p: -p[1])[:3])
    return (f"budget.memory_bytes: the limits add up to {worst / MB:,.0f} MB at worst, over the "
            f"budget of {budget / MB:,.0f} MB; the largest parts: {largest}. Lower them, or raise "
            "[budget] memory_bytes to what the machine gives wtwind")
