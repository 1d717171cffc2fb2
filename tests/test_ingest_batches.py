"""A frame's events handled as a batch (issue 18).

The checks of a batch of loss events a column at a time (``wire.loss_columns``) and of
one plain loss event (``wire.plain_loss``) must judge every event exactly as the general
checks judge it alone: hostile batches (wrong types, bools, None, out-of-range integers,
over-long strings, unknown fields, a bad emitter or secret on the batch) are decoded both
ways and compared. And a run fed a trainer's batches through ``Server.handle_frame`` (the
columns path: one admission, the seqs checked at once) ends in the same state, with the
same alerts and the same monitor snapshot, as one fed the same events one per frame.
"""

from __future__ import annotations

import asyncio
import math
import random

import msgpack

from helpers import fed_state
from wtwin.daemon.config import DaemonConfig, ListenConfig
from wtwin.daemon.server import Server
from wtwin.daemon.store.config import StateConfig
from wtwin.emitters import wire

HOSTILE = [None, True, False, 0, 1, -1, 2**63 - 1, 2**63, 2**64 - 1, -2**63, 1.5, -0.0, math.nan,
           math.inf, "", "e", "loss", "x" * 65, "x" * 129, "x" * 201, b"bytes", [], [1], {}, {"a": 1}]
FIELDS = ("v", "type", "run", "seq", "step", "loss", "lr", "grad_norm", "tokens", "rank", "ts",
          "emitter", "auth", "base", "metrics", "extra")


def judged_alone(obj) -> tuple[list[dict], list[str]]:
    """The protocol's definition: each event of the batch, with the batch's emitter and
    auth inherited, judged on its own by the general checks; a refused one keeps its place
    in the sequence (``wire.refused``)."""
    events, rejects = [], []
    for ev in obj["events"]:
        if type(ev) is not dict:
            rejects.append("not_a_map")
            continue
        for name in ("emitter", "auth"):
            if obj.get(name) is not None and name not in ev:
                ev[name] = obj[name]
        try:
            events.append(wire._validate_general(ev))
        except wire.WireError as exc:
            rejects.append(exc.reason)
            kept = wire.refused(ev, exc.reason)     # its place in the sequence, kept
            if kept is not None:
                events.append(kept)
    return events, rejects


def loss_events(n: int, first: int = 1, run: str = "r") -> list[dict]:
    # a send time each: a point's time is its event's ts, else its arrival (which differs
    # between two feeds of the same events)
    return [{"v": 1, "type": "loss", "run": run, "seq": s, "step": s, "loss": 2.0 + 1.0 / s,
             "lr": 3e-4, "emitter": "e", "ts": 1.7e9 + s} for s in range(first, first + n)]


def test_batch_checks_judge_each_event_as_the_general_checks_do():
    rng = random.Random(18)
    columns_used = fallbacks = 0
    for _ in range(4000):
        evs = loss_events(rng.randrange(1, 6))
        for _ in range(rng.choice((0, 0, 1, 2))):  # some events changed, some not
            ev, name = rng.choice(evs), rng.choice(FIELDS)
            if rng.random() < 0.2:
                ev.pop(name, None)
            else:
                ev[name] = rng.choice(HOSTILE)
        if rng.random() < 0.3:  # the same change in every event: the column checks must see it
            name, val = rng.choice(FIELDS), rng.choice(HOSTILE)
            for ev in evs:
                ev[name] = val
        if rng.random() < 0.1:
            evs.insert(rng.randrange(len(evs) + 1), rng.choice(HOSTILE))  # not a map
        frame_obj = {"v": 1, "type": "batch", "events": evs}
        for name in ("emitter", "auth", "base"):
            if rng.random() < 0.5:
                frame_obj[name] = rng.choice(HOSTILE + ["e", "s3cret", 1])
        frame = msgpack.packb(frame_obj, use_bin_type=True)
        want_events, want_rejects = judged_alone(msgpack.unpackb(frame))
        events, rejects, batch = wire.decode_frame(frame)     # what the daemon takes
        if batch is not None:
            wire.inherit(events, batch)
        assert rejects == want_rejects, frame_obj
        # the same events (NaN compared as packed bytes); ``base`` is the batch's
        assert msgpack.packb([{k: v for k, v in e.items() if k != "base"} for e in events]) == \
            msgpack.packb([{k: v for k, v in e.items() if k != "base"} for e in want_events])
        base = frame_obj.get("base")
        if type(base) is int and 0 <= base <= 2**63 - 1:
            assert all(e["base"] == base for e in events)
        else:
            assert all("base" not in e for e in events)
        batch = wire.decode_frame(frame)[2]
        if batch is not None and batch.columns is not None:
            columns_used += 1
        else:
            fallbacks += 1
    assert columns_used > 500 and fallbacks > 500  # both paths were exercised


def test_a_single_plain_loss_event_is_judged_as_the_general_checks_do():
    rng = random.Random(15)
    for _ in range(4000):
        ev = loss_events(1)[0]
        ev.update({"grad_norm": 0.5, "tokens": 1e6, "rank": 0, "ts": 1.0, "auth": "s"})
        for _ in range(rng.choice((0, 1, 2))):
            name = rng.choice(FIELDS)
            if rng.random() < 0.2:
                ev.pop(name, None)
            else:
                ev[name] = rng.choice(HOSTILE)
        frame = msgpack.packb(ev, use_bin_type=True)
        try:
            want = ([wire._validate_general(msgpack.unpackb(frame))], [])
        except wire.WireError as exc:
            want = ([], [exc.reason])
        events, rejects = wire.decode(frame)
        assert rejects == want[1], ev
        assert msgpack.packb([{k: v for k, v in e.items() if k != "base"} for e in events]) == \
            msgpack.packb([{k: v for k, v in e.items() if k != "base"} for e in want[0]])
        assert all("base" not in e for e in events)  # a batch's field only


def _curve(n: int) -> list[dict]:
    """A run that goes wrong: a power law, a spike at 1500, divergence from 2600."""
    rng = random.Random(7)
    evs = loss_events(n)
    for ev in evs:
        t = ev["step"]
        ev["loss"] = 2.6 + 9 * t ** -0.35 + rng.gauss(0, 0.03) + (3.0 if t == 1500 else 0.0) \
            + (2e-3 * (t - 2600) if t > 2600 else 0.0)
    return evs


def test_batches_end_in_the_state_single_events_do(tmp_path):
    evs = _curve(4000)
    singles = [wire.encode(ev) for ev in evs]
    batches = [wire.encode_batch(evs[:1], "e", base=1)]  # the run's first frame: a new run
    for i in range(1, len(evs), 100):
        batches.append(wire.encode_batch(evs[i:i + 100], "e", base=i + 1))
    # a re-send of frames already handled (a lost ack): every event a duplicate
    resent = batches[3:5]
    batch_frame = wire.decode_frame(batches[2])[2]
    assert batch_frame.columns is not None  # without the decoder: the columns path

    async def all_three():
        one = await fed_state(tmp_path, "single", singles + [wire.encode(ev) for ev in evs[300:500]], "r")
        many = await fed_state(tmp_path, "batched", batches + resent, "r")  # the daemon's reader
        columns = await fed_state(tmp_path, "columns", batches + resent, "r", fast=None)
        return one, many, columns

    one, *others = asyncio.run(all_three())
    assert one["alerts"] and one["dropped"] == {"duplicate": 200}
    for many in others:
        for key in ("events", "hwm", "step", "loss", "lr", "spark", "monitor", "received", "alerts",
                    "dropped"):
            assert one[key] == many[key], key
        assert msgpack.packb(one["series"]) == msgpack.packb(many["series"])
    assert one["events"] == 4000 and one["hwm"] == {"e": 4000}


def test_a_batch_of_several_runs_reaches_each_run_in_order(tmp_path):
    a, b = loss_events(300, run="r"), loss_events(300, run="q")
    mixed = [ev for pair in zip(a, b) for ev in pair]
    frames = [wire.encode(ev) for ev in a[:1] + b[:1]]  # both runs live first
    frames += [wire.encode_batch(mixed[i:i + 50], "e") for i in range(2, len(mixed), 50)]

    async def feed():
        cfg = DaemonConfig(listen=ListenConfig(endpoints=(f"ipc://{tmp_path}/m.sock",)),
                           state=StateConfig(path=str(tmp_path / "m.db"), flush_interval_s=60))
        server = Server(cfg)
        server.store.open(asyncio.get_running_loop())
        for frame in frames:
            server.handle_frame(b"trainer", frame)
        out = {name: (server.table.get(name).events, server.table.get(name).step) for name in ("r", "q")}
        dropped = dict(server.stats.dropped)
        server.snapshots.close()
        await server.store.close()
        return out, dropped

    out, dropped = asyncio.run(feed())
    # each run's emitter "e" is its own: both runs got every event, in seq order
    assert out == {"r": (300, 300), "q": (300, 300)} and dropped == {}


def test_a_refused_group_counts_each_of_its_events_and_changes_nothing(tmp_path):
    """Another client's batch to a live run (the columns path) and a mixed batch (the
    general path): one admission per (emitter, secret), every refused event counted."""
    own = [dict(ev, auth="mine") for ev in loss_events(10)]
    theirs = loss_events(50, first=11)
    mixed = loss_events(5, first=11) + [{"v": 1, "type": "heartbeat", "run": "r", "seq": 16,
                                         "emitter": "e"}]

    async def feed():
        cfg = DaemonConfig(listen=ListenConfig(endpoints=(f"ipc://{tmp_path}/o.sock",)),
                           state=StateConfig(path=str(tmp_path / "o.db"), flush_interval_s=60))
        server = Server(cfg)
        server.store.open(asyncio.get_running_loop())
        server.handle_frame(b"trainer", wire.encode_batch(own, "e"))
        assert wire.decode_frame(wire.encode_batch(theirs, "e", auth="other"))[2].columns is not None
        server.handle_frame(b"intruder", wire.encode_batch(theirs, "e", auth="other"))
        server.handle_frame(b"intruder", wire.encode_batch(mixed, "e", auth="other"))
        run = server.table.get("r")
        out = (run.events, dict(run.marks.hwm), dict(server.stats.dropped), dict(server.stats.received))
        server.snapshots.close()
        await server.store.close()
        return out

    events, hwm, dropped, received = asyncio.run(feed())
    assert (events, hwm) == (10, {"e": 10})
    assert dropped == {"not_owner": 56}
    assert received == {"loss": 65, "heartbeat": 1}
