"""A refused event keeps its place in its emitter's sequence (``wire.REFUSED``): the
events after it are no gap. Before, one event the checks refused (a newer trainer's event
type or field, a bad value) left a hole that the daemon asked to be re-sent forever, and
every later event of the run was dropped as ``out_of_order``: the run froze at the step
before it. Real wtwind, a bare DEALER socket."""

from __future__ import annotations

import json

import msgpack

from helpers import Daemon, http_get, raw_dealer, sample, wait_for
from wtwin.emitters import wire


def step_of(d, run):
    status, body = http_get(f"{d.url}/api/runs/{run}")
    return json.loads(body).get("step") if status == 200 else None


def loss(seq: int, step: int, **kw) -> dict:
    return {"v": 1, "type": "loss", "run": "r", "seq": seq, "step": step, "loss": 3.0 - step / 100, **kw}


def replies(sock, until) -> list[dict]:
    got: list[dict] = []

    def more():
        while sock.poll(0):
            got.append(msgpack.unpackb(sock.recv()))
        return until(got)
    wait_for(more, what="the daemon's replies")
    return got


def test_the_events_after_a_refused_one_are_processed_and_acked(tmp_path):
    with Daemon(tmpdir=str(tmp_path)) as d:
        raw = raw_dealer(d.tcp)
        start = {"v": 1, "type": "run_start", "run": "r", "seq": 1}
        raw.send(wire.encode_batch([start, loss(2, 1), loss(3, 2)], "e", base=1))
        wait_for(lambda: step_of(d, "r") == 2, what="the run's first losses")
        future = {"v": 1, "type": "from_a_newer_trainer", "run": "r", "seq": 4, "step": 3}
        bad = loss(5, 3, lr="not a number")
        raw.send(wire.encode_batch([future, bad] + [loss(s, s - 3) for s in range(6, 11)], "e", base=1))
        wait_for(lambda: step_of(d, "r") == 7, what="the losses after the refused events")
        assert (sample(d, "wtwind_events_rejected_total", reason="unknown_type") or 0) >= 1
        assert (sample(d, "wtwind_events_rejected_total", reason="bad_type") or 0) >= 1
        assert not sample(d, "wtwind_events_dropped_total", reason="out_of_order")
        acks = replies(raw, lambda got: any(r.get("type") == "ack" and r.get("seq") == 10 for r in got))
        assert not [r for r in acks if r.get("resend")], acks        # no re-send asked
        raw.close()


def test_a_refused_event_of_another_run_or_owner_moves_nothing(tmp_path):
    """Its place is admitted like any event: with the run's secret, for a run in memory."""
    with Daemon(tmpdir=str(tmp_path)) as d:
        raw = raw_dealer(d.tcp)
        start = {"v": 1, "type": "run_start", "run": "r", "seq": 1}
        raw.send(wire.encode_batch([start, loss(2, 1)], "e", auth="mine", base=1))
        wait_for(lambda: step_of(d, "r") == 1, what="the run")
        intruder = raw_dealer(d.tcp)       # refused events under another secret: not the owner
        intruder.send(wire.encode_batch([{"v": 1, "type": "nope", "run": "r", "seq": 3}], "e",
                                        auth="theirs", base=1))
        intruder.send(wire.encode_batch([{"v": 1, "type": "nope", "run": "ghost", "seq": 1}], "x"))
        wait_for(lambda: (sample(d, "wtwind_events_dropped_total", reason="not_owner") or 0) >= 1,
                 what="the intruder's refused event refused again")
        raw.send(wire.encode_batch([loss(3, 2)], "e", auth="mine", base=1))
        wait_for(lambda: step_of(d, "r") == 2, what="the owner's next event, seq 3, still its own")
        status, _ = http_get(f"{d.url}/api/runs/ghost")
        assert status == 404                       # a refused event creates no run
        raw.close()
        intruder.close()

