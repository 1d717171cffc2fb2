"""wtwind end to end with the run's time and memory (issue 39): a real daemon, real ZeroMQ.

The frames are sent by a bare DEALER, so that their ``ts`` is the run's own time (a
slowdown held for minutes of it, sent in a second); the alerts come back to it as to a
trainer."""

import msgpack
import zmq

from helpers import raw_dealer, sample, wait_for
from wtwin.emitters import wire

GIB = float(2 ** 30)


def _send(sock, run: str, events: list[dict], seq0: int) -> int:
    """Batches of 100 loss events of emitter ``em-<run>``; returns the next seq."""
    for i in range(0, len(events), 100):
        chunk = [{"v": 1, "type": "loss", "run": run, "seq": seq0 + i + k, **ev}
                 for k, ev in enumerate(events[i:i + 100])]
        sock.send(wire.encode({"v": 1, "type": "batch", "events": chunk, "emitter": f"em-{run}"}))
    return seq0 + len(events)


def _alerts(sock) -> list[dict]:
    out = []
    while sock.poll(0, zmq.POLLIN):
        msg = msgpack.unpackb(sock.recv(), raw=False)
        if msg.get("type") == "alert":
            out.append(msg)
    return out


class TestTiming:
    def test_a_slowdown_pages_throughput_with_its_size_and_the_trainer_gets_it(self, daemon):
        """1.5x slower from step 3,000 (the data wait rising with it), a 20 s checkpoint
        every 500 steps: one `throughput` page, data starvation named, back at the sender,
        and the size in /metrics."""
        sock = raw_dealer(daemon.tcp)
        ts, events = 1.7e9, []
        for t in range(1, 5001):
            ts += (0.3 if t > 3000 else 0.2) + (20.0 if t % 500 == 0 else 0.0)
            events.append({"step": t, "loss": 2.0 + 5.0 / t ** 0.5 + 0.01 * ((t * 7919) % 13 - 6) / 6,
                           "ts": ts})
        _send(sock, "slow", events, 1)
        wait_for(lambda: sample(daemon, "wtwind_run_alert_severity", run="slow", kind="throughput") == 2,
                 timeout=30, what="a throughput page")
        ratio = sample(daemon, "wtwind_run_step_slowdown_ratio", run="slow")
        assert 1.4 < ratio < 1.6
        got = []
        wait_for(lambda: got.extend(_alerts(sock)) or any(a["kind"] == "throughput" for a in got),
                 what="the alert back at the sender")
        (page,) = [a for a in got if a["kind"] == "throughput" and a["status"] == "firing"]
        assert page["step"] > 3000 and "1.5x" in page["message"]
        assert [a for a in got if a["kind"] != "throughput" and a["severity"] != "info"] == []
        sock.close()

    def test_memory_toward_the_total_pages_and_is_exported(self, daemon):
        """Memory every 50 steps (the general path: fields of time and memory), growing
        1 GiB/h toward 48 GiB: a `memory` page, the bytes and the forecast in /metrics."""
        sock = raw_dealer(daemon.tcp)
        events = []
        for i in range(1, 400):
            events.append({"step": 50 * i, "loss": 2.0 + 5.0 / (50 * i) ** 0.5, "ts": 1.7e9 + 60.0 * i,
                           "mem_reserved": (40 + i / 60) * GIB, "mem_total": 48 * GIB,
                           "step_time_s": 1.2})
        _send(sock, "leak", events, 1)
        wait_for(lambda: sample(daemon, "wtwind_run_alert_severity", run="leak", kind="memory") == 2,
                 timeout=30, what="a memory page")
        assert sample(daemon, "wtwind_run_memory_bytes", run="leak", type="total") == 48 * GIB
        left = sample(daemon, "wtwind_run_memory_forecast_seconds", run="leak")
        assert left is not None and 0 < left <= 7200
        assert sample(daemon, "wtwind_run_alert_active", run="leak", kind="throughput") is None
        sock.close()

    def test_the_memory_page_names_the_last_checkpoint(self, daemon):
        """Checkpoint events at steps 10,000 and 15,000 among the reports: the memory page
        back at the trainer says when the total is reached, at which step, and the last
        checkpoint (what an OOM would fall back to)."""
        sock = raw_dealer(daemon.tcp)
        frames = []
        for i in range(1, 400):
            frames.append({"type": "loss", "step": 50 * i, "loss": 2.0 + 5.0 / (50 * i) ** 0.5,
                           "ts": 1.7e9 + 60.0 * i, "mem_reserved": (40 + i / 60) * GIB,
                           "mem_total": 48 * GIB})
            if i in (200, 300):
                frames.append({"type": "checkpoint", "step": 50 * i, "path": f"/nowhere/ckpt-{50 * i}.pt"})
        for i in range(0, len(frames), 100):
            chunk = [{"v": 1, "run": "ckpt", "seq": 1 + i + k, **ev}
                     for k, ev in enumerate(frames[i:i + 100])]
            sock.send(wire.encode({"v": 1, "type": "batch", "events": chunk, "emitter": "em-ckpt"}))
        got = []
        wait_for(lambda: got.extend(_alerts(sock)) or any(a["kind"] == "memory" for a in got),
                 timeout=30, what="the memory page back at the sender")
        (page,) = [a for a in got if a["kind"] == "memory" and a["status"] == "firing"]
        assert "GiB/h" in page["message"] and "(at step ~" in page["message"]
        assert "Last checkpoint: step 15,000" in page["message"]
        sock.close()
