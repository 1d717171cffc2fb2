"""Stored pages equal live pages (issue 37 item 7): right after a restart, an ended run the
daemon holds again in memory shows what the store shows once it has left memory: its
whole history (W and lr included) and its alerts, not a 47-point sparkline under banners
that say "No alerts". A real wtwind, restarted on the same store; real emitters."""

from __future__ import annotations

import math

from helpers import Daemon, run_at

from wtwin.emitters import connect


def curve(t: int) -> float:
    return 2.0 + 8.0 * (t + 50) ** -0.45 + 0.02 * math.sin(t * 1.7)


def test_an_ended_run_right_after_a_restart_is_its_stored_page(tmp_path):
    d = Daemon(tmpdir=str(tmp_path)).start()
    try:
        e = connect(d.ipc, run="nan-run")
        for t in range(1, 3001):
            e.loss(t, curve(t) if t < 2900 else float("nan"), lr=3e-4 * (1 - t / 4000))
            if t % 250 == 0:
                e.eval(t, val_loss=curve(t) + 0.05)
        e.close("failed")
        before = run_at(d, "nan-run", 3000, "failed")
        assert any(m["kind"] == "nonfinite" for m in before["markers"])
    finally:
        d.stop()
    with Daemon(tmpdir=str(tmp_path)) as d2:       # the ended run is back in memory
        live = run_at(d2, "nan-run", 3000, "failed")
        assert live["stored"] is False and live.get("from_store") is True
    gone = {"WTWIND_RUNS__ENDED_TTL_S": "0", "WTWIND_RUNS__ENDED_SERIES_S": "0"}
    with Daemon(tmpdir=str(tmp_path), extra_env=gone) as d3:   # from the store only
        stored = run_at(d3, "nan-run", 3000, "failed")
        assert stored["stored"] is True
    for f in ("step", "loss", "W", "lr"):
        assert live["series"][f] == stored["series"][f], f
    assert len(live["series"]["step"]) > 500
    assert any(v is not None for v in live["series"]["W"]) and any(v is not None for v in live["series"]["lr"])
    assert live["eval"] == stored["eval"] and len(live["eval"]["step"]) == 12
    key = lambda m: (m["step"], m["kind"], m["status"], m["severity"])   # noqa: E731
    assert [key(m) for m in live["markers"]] == [key(m) for m in stored["markers"]]
    assert any(m["kind"] == "nonfinite" and m["severity"] == "critical" for m in live["markers"])
