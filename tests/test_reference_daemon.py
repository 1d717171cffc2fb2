"""Reference runs through a real wtwind (docs/REFERENCES.md): real emitters over ZeroMQ, a
real webhook server, /metrics, the trainer's on_alert, a restart."""

from __future__ import annotations

import json
import random
from pathlib import Path

import msgpack
import pytest

from helpers import Daemon, http_get, raw_dealer, sample, wait_for
from wtwin.emitters import connect, wire
from http_recorder import ThreadedRecorder

STEPS = 3000


def curve(seed: int, power: float = 0.5) -> list[float]:
    """A power-law loss with its own noise; ``power`` < 0.5 learns more slowly."""
    rng = random.Random(seed)
    return [2 + 3 * s ** -power + rng.gauss(0, 0.02) for s in range(1, STEPS + 1)]


TEAM = "team-secret-" + "x" * 32   # one principal: runs compare only inside theirs (issue 38)


def send_run(endpoint: str, run: str, losses, **kw):
    got: list[dict] = []
    kw.setdefault("secret", TEAM)
    emit = connect(endpoint, run=run, on_alert=got.append, **kw)
    for step, loss in enumerate(losses, 1):
        emit.loss(step, loss)
    return emit, got


def at_step(daemon: Daemon, run: str, step: int) -> None:
    wait_for(lambda: sample(daemon, "wtwind_run_step", run=run) == step, 30, 0.1,
             f"{run} at step {step}")


@pytest.fixture
def hooked(tmp_path):
    recv = ThreadedRecorder()
    cfg = tmp_path / "wtwind.toml"
    cfg.write_text(f'[[sinks]]\ntype = "webhook"\nname = "hook"\nurl = "{recv.base}/hook"\n\n'
                   '[[routes]]\nsinks = ["hook"]\n')
    with Daemon(args=("--config", str(cfg)), tmpdir=str(tmp_path)) as d:
        yield d, recv
    recv.close()


def behind_alerts(recv) -> list[dict]:
    return [a for r in recv.requests("/hook") for a in r.json()["alerts"]
            if a["labels"].get("kind") == "behind"]


class TestBehind:
    def test_slower_run_pages_to_webhook_and_metrics(self, hooked):
        """B names A and learns more slowly: a behind alert reaches the webhook, the trainer
        and /metrics; C, equal to A but for its seed, stays silent."""
        daemon, recv = hooked
        a, _ = send_run(daemon.ipc, "run-a", curve(1))
        at_step(daemon, "run-a", STEPS)
        a.close()
        b, b_got = send_run(daemon.ipc, "run-b", curve(2, power=0.35), reference="run-a")
        c, c_got = send_run(daemon.ipc, "run-c", curve(3), reference="run-a")
        at_step(daemon, "run-b", STEPS)
        at_step(daemon, "run-c", STEPS)
        (alert, *_) = wait_for(lambda: behind_alerts(recv), 30, 0.1, "a behind alert at the webhook")
        assert alert["labels"]["run"] == "run-b"
        assert "above run-a at step" in alert["annotations"]["description"] + alert["annotations"].get(
            "summary", ""), alert
        wait_for(lambda: b.poll() or [x for x in b_got if x["kind"] == "behind"], 10, 0.05,
                 "the behind alert at the trainer")
        gap = sample(daemon, "wtwind_run_behind_reference", run="run-b", reference="run-a")
        assert gap is not None and gap > 0.02, gap
        assert sample(daemon, "wtwind_run_behind_reference", run="run-c", reference="run-a") < 0.02
        c.poll()
        assert not [x for x in c_got if x["kind"] == "behind"]
        assert {al["labels"]["run"] for al in behind_alerts(recv)} == {"run-b"}
        assert '"event": "reference_attached"' in daemon.log()
        b.close(), c.close()

    def test_group_siblings_are_references(self, daemon):
        """No name, a group: the group's finished sibling is the reference; behind pages."""
        a, _ = send_run(daemon.ipc, "sweep-a", curve(1), group="sweep-7")
        at_step(daemon, "sweep-a", STEPS)
        a.close()
        b, got = send_run(daemon.ipc, "sweep-b", curve(2, power=0.35), group="sweep-7")
        at_step(daemon, "sweep-b", STEPS)
        wait_for(lambda: b.poll() or [x for x in got if x["kind"] == "behind"], 15, 0.05,
                 "the behind alert at the trainer")
        assert "above sweep-a" in next(x for x in got if x["kind"] == "behind")["message"]
        assert not [x for x in got if x["kind"] == "reference_missing"]
        b.close()

    def test_a_sibling_stuck_two_decades_above_a_falling_one_pages_with_the_ratio(self, daemon):
        """A group whose finished sibling fell from 40 to 0.08 (a physics-informed net's
        shape: its noise multiplies); the next member sticks at 3.0. On the loss scale
        that is 7% of the sibling's progress and within its scatter; on the log scale the
        daemon compares such a curve on, it pages, and the trainer reads the ratio."""
        rng = random.Random(5)
        fall = [40.0 * (1 + s / 50) ** -1.5 * 2.0 ** rng.gauss(0, 0.5) for s in range(1, STEPS + 1)]
        a, _ = send_run(daemon.ipc, "pinn-a", fall, group="pinn")
        at_step(daemon, "pinn-a", STEPS)
        a.close()
        stuck = [max(40.0 * (1 + s / 50) ** -1.5, 3.0) * 2.0 ** rng.gauss(0, 0.5) for s in range(1, STEPS + 1)]
        b, got = send_run(daemon.ipc, "pinn-b", stuck, group="pinn")
        at_step(daemon, "pinn-b", STEPS)
        wait_for(lambda: b.poll() or [x for x in got if x["kind"] == "behind"], 15, 0.05,
                 "the behind alert at the trainer")
        msg = next(x for x in got if x["kind"] == "behind")["message"]
        assert "x pinn-a's " in msg and "on a log scale" in msg, msg
        b.close()

    def test_a_sweep_started_together_compares_once_a_member_ends(self, daemon):
        """Two siblings start together (no history to compare with); when the fast one
        ends, the slow one takes it as its reference and falls behind."""
        fast, slow = curve(1), curve(2, power=0.35)
        a, _ = send_run(daemon.ipc, "sw-a", fast, group="sweep-8")
        b, got = send_run(daemon.ipc, "sw-b", slow[:100], group="sweep-8")
        at_step(daemon, "sw-a", STEPS)
        at_step(daemon, "sw-b", 100)
        a.close()
        wait_for(lambda: '"references": ["sw-a"]' in daemon.log(), 15, 0.05, "sw-a attached to sw-b")
        for step, loss in enumerate(slow[100:], 101):
            b.loss(step, loss)
        at_step(daemon, "sw-b", STEPS)
        wait_for(lambda: b.poll() or [x for x in got if x["kind"] == "behind"], 15, 0.05, "behind sw-a")
        b.close()

    def test_missing_reference_warns_the_trainer_not_refused(self, daemon):
        """A reference that does not exist: an info alert at the trainer, a log line; the run goes on."""
        emit, got = send_run(daemon.ipc, "run-x", curve(4)[:50], reference="no-such-run")
        wait_for(lambda: emit.poll() or [x for x in got if x["kind"] == "reference_missing"], 15, 0.05,
                 "the reference_missing warning at the trainer")
        warn = next(x for x in got if x["kind"] == "reference_missing")
        assert "no-such-run" in warn["message"] and "not compared" in warn["message"]
        at_step(daemon, "run-x", 50)   # not refused: its losses are taken
        assert not emit.errors
        assert '"event": "reference_missing"' in daemon.log()
        assert sample(daemon, "wtwind_references_missing_total") == 1
        emit.close()


class TestScheduleDiffers:
    def test_another_lr_is_told_to_the_trainer_once_as_info(self, daemon):
        """Issue 37 item 6: a run whose lr differs from its reference's (1e-4 vs 1e-3) gets
        one ``schedule_differs`` info at its ``on_alert``, with both lrs; no page."""
        emit = connect(daemon.ipc, run="lr-a", secret=TEAM)
        for step, loss in enumerate(curve(1), 1):
            emit.loss(step, loss, lr=1e-3)
        at_step(daemon, "lr-a", STEPS)
        got: list[dict] = []
        b = connect(daemon.ipc, run="lr-b", reference="lr-a", secret=TEAM, on_alert=got.append)
        for step, loss in enumerate(curve(2, power=0.35)[:1500], 1):
            b.loss(step, loss, lr=1e-4)
        at_step(daemon, "lr-b", 1500)
        told = wait_for(lambda: b.poll() or [x for x in got if x["kind"] == "schedule_differs"], 15, 0.05,
                        "schedule_differs at the trainer")
        for step in range(1501, 1600):           # more losses, more polls: still once
            b.loss(step, 2.5, lr=1e-4)
        at_step(daemon, "lr-b", 1599)
        b.poll()
        told = [x for x in got if x["kind"] == "schedule_differs"]
        assert len(told) == 1 and told[0]["severity"] == "info", told
        assert "lr differs from lr-a's (0.0001 vs 0.001" in told[0]["message"], told[0]["message"]
        assert not [x for x in got if x["kind"] == "behind"]
        assert daemon.log().count('"event": "schedule_differs"') == 1
        c_got: list[dict] = []        # a sibling at lr/10 that hardly learns: far behind, a page
        c = connect(daemon.ipc, run="lr-c", reference="lr-a", secret=TEAM, on_alert=c_got.append)
        for step in range(1, 1501):
            c.loss(step, 6.5 - 0.2 * step / 3000 + random.Random(step).gauss(0, 0.02), lr=1e-4)
        at_step(daemon, "lr-c", 1500)
        wait_for(lambda: c.poll() or [x for x in c_got if x["kind"] == "behind"], 15, 0.05,
                 "the behind page at the trainer")
        page = next(x for x in c_got if x["kind"] == "behind")
        assert page["severity"] == "warning" and "lr differs (0.0001 vs 0.001)" in page["message"], page
        emit.close()
        b.close()
        c.close()


class TestInsideAPrincipal:
    """Issue 38: groups and references stay inside a principal (its secret, or its key)."""

    def test_another_principals_runs_in_my_group_are_ignored_and_counted(self, daemon):
        """Another principal starts 4 runs in ``sweep-7`` with a far lower curve: the
        victim's run of the group is not compared with them (a79b833: a false ``behind``,
        "1.36 above sweep-7-evil1"), and they are counted."""
        evil = []
        for i in range(4):
            e, _ = send_run(daemon.ipc, f"sweep-7-evil{i}", [x - 1.5 for x in curve(10 + i)][:400],
                            group="sweep-7", secret=f"evil-secret-{i}-" + "y" * 32)
            evil.append(e)
        for i in range(4):
            at_step(daemon, f"sweep-7-evil{i}", 400)
        v, got = send_run(daemon.ipc, "sweep-7-victim", curve(1)[:400], group="sweep-7", secret="victim-" + "z" * 32)
        at_step(daemon, "sweep-7-victim", 400)
        wait_for(lambda: (sample(daemon, "wtwind_references_foreign_total") or 0) >= 4, 15, 0.05,
                 "the other principal's siblings counted")
        v.poll()
        assert not [x for x in got if x["kind"] == "behind"], got
        doc = json.loads(http_get(f"{daemon.url}/api/runs/sweep-7-victim")[1])["references"]
        assert not doc.get("curves"), doc
        assert '"event": "reference_attached"' not in daemon.log()
        for e in (*evil, v):
            e.close()

    def test_naming_another_principals_run_reads_nothing_and_says_missing(self, daemon):
        """The attacker names the victim's run: its API carries no curve of it, and its
        ``reference_missing`` reads word for word as for a name that does not exist."""
        victim, _ = send_run(daemon.ipc, "victim-a", curve(1)[:300], secret="victim-" + "z" * 32)
        at_step(daemon, "victim-a", 300)
        spy, got = send_run(daemon.ipc, "spy-b", curve(2)[:50], reference=["victim-a", "no-such-run"],
                            secret="spy-" + "w" * 32)
        at_step(daemon, "spy-b", 50)
        wait_for(lambda: spy.poll() or len([x for x in got if x["kind"] == "reference_missing"]) >= 2, 15, 0.05,
                 "both names warned of")
        said = {x["reference"]: x["message"] for x in got if x["kind"] == "reference_missing"}
        assert said["victim-a"].replace("victim-a", "NAME") == said["no-such-run"].replace("no-such-run", "NAME")
        doc = json.loads(http_get(f"{daemon.url}/api/runs/spy-b")[1])["references"]
        assert not doc.get("curves"), doc
        assert sample(daemon, "wtwind_references_foreign_total") >= 1
        victim.close(), spy.close()

    def test_a_run_the_operator_shares_is_compared_across_principals(self, tmp_path):
        """``[runs] shared = ["baseline-*"]``: any principal may compare with it."""
        cfg = tmp_path / "wtwind.toml"
        cfg.write_text('[runs]\nshared = ["baseline-*"]\n')
        with Daemon(args=("--config", str(cfg)), tmpdir=str(tmp_path)) as d:
            a, _ = send_run(d.ipc, "baseline-a", curve(1)[:300], secret="ops-" + "o" * 32)
            at_step(d, "baseline-a", 300)
            b, _ = send_run(d.ipc, "mine-b", curve(2)[:50], reference="baseline-a", secret="me-" + "m" * 32)
            at_step(d, "mine-b", 50)
            doc = wait_for(lambda: json.loads(http_get(f"{d.url}/api/runs/mine-b")[1])["references"].get("curves"),
                           15, 0.1, "the shared run's curve attached")
            assert "baseline-a" in doc
            a.close(), b.close()


class TestReferenceBudget:
    def test_curves_past_max_reference_points_are_not_attached_and_said(self, tmp_path):
        """Issue 38: every run's curves together stay within ``[runs]
        max_reference_points`` (the memory budget's share); one more run naming the long
        run is told ``reference_missing`` in words, and /metrics shows held <= limit."""
        with Daemon(tmpdir=str(tmp_path), extra_env={"WTWIND_RUNS__MAX_REFERENCE_POINTS": "2500"}) as d:
            a, _ = send_run(d.ipc, "long-a", curve(1))
            at_step(d, "long-a", STEPS)
            got = {}
            for i in range(4):
                e, got[i] = send_run(d.ipc, f"ref-{i}", curve(2)[:20], reference="long-a")
                at_step(d, f"ref-{i}", 20)
                e.poll()
                got[i] = (e, got[i])
            held = sample(d, "wtwind_budget_items", part="reference_points", state="held")
            assert 0 < held <= 2500 and sample(d, "wtwind_budget_items", part="reference_points",
                                                 state="limit") == 2500
            e, seen = got[3]
            wait_for(lambda: e.poll() or [x for x in seen if x["kind"] == "reference_missing"], 15, 0.05,
                     "the run past the budget told")
            assert "reference budget" in next(x for x in seen if x["kind"] == "reference_missing")["message"]
            for e, _ in got.values():
                e.close()
            a.close()


LOOK_SOON = {"WTWIND_RUNS__REFERENCE_RESOLVE_S": "0.001"}   # looked up again at (nearly) the next loss


class TestLaterReferences:
    def test_a_reference_that_appears_later_is_picked_up(self, tmp_path):
        """run-b names run-a before run-a exists: one warning; once run-a has run, b's next
        losses look again, compare with it and page; the points count in the budget."""
        with Daemon(tmpdir=str(tmp_path), extra_env=LOOK_SOON) as d:
            slow = curve(2, power=0.35)
            b, got = send_run(d.ipc, "run-b", slow[:100], reference="run-a")
            at_step(d, "run-b", 100)
            assert sample(d, "wtwind_budget_items", part="reference_points", state="held") == 0
            a, _ = send_run(d.ipc, "run-a", curve(1))
            at_step(d, "run-a", STEPS)
            a.close()
            for step, loss in enumerate(slow[100:], 101):
                b.loss(step, loss)
            at_step(d, "run-b", STEPS)
            wait_for(lambda: b.poll() or [x for x in got if x["kind"] == "behind"], 15, 0.05, "behind run-a")
            assert len([x for x in got if x["kind"] == "reference_missing"]) == 1   # warned once
            assert '"references": ["run-a"]' in d.log()
            held = sample(d, "wtwind_budget_items", part="reference_points", state="held")
            assert 2 <= held <= 2048
            assert sample(d, "wtwind_budget_items", part="reference_points", state="limit") == 750_000   # the default
            b.close()

    def test_a_sibling_that_starts_later_is_picked_up(self, tmp_path):
        """sw-b starts alone in its group; sw-a starts later and is still running: sw-b
        looks again (sw-a's run_start brought the look forward) and falls behind it."""
        with Daemon(tmpdir=str(tmp_path), extra_env=LOOK_SOON) as d:
            slow = curve(2, power=0.35)
            b, got = send_run(d.ipc, "sw-b", slow[:100], group="sweep-9")
            at_step(d, "sw-b", 100)
            a, _ = send_run(d.ipc, "sw-a", curve(1), group="sweep-9")
            at_step(d, "sw-a", STEPS)
            for step, loss in enumerate(slow[100:], 101):
                b.loss(step, loss)
            at_step(d, "sw-b", STEPS)
            wait_for(lambda: b.poll() or [x for x in got if x["kind"] == "behind"], 15, 0.05, "behind sw-a")
            assert '"run": "sw-b"' in d.log() and '"references": ["sw-a"]' in d.log()
            a.close(), b.close()

    def test_a_tracker_rebuilt_on_a_grown_reference_resolves_its_page(self, tmp_path):
        """sw-d falls behind sw-c's first 400 steps (sw-c still running, slow at first);
        sw-c then catches up: once sw-d looks again at the grown sw-c, it is not behind it
        any more and the page resolves at the trainer."""
        with Daemon(tmpdir=str(tmp_path), extra_env=LOOK_SOON) as d:
            c, _ = send_run(d.ipc, "sw-c", curve(1)[:400], group="sweep-10")
            at_step(d, "sw-c", 400)
            dd, got = send_run(d.ipc, "sw-d", [x + 0.5 for x in curve(2)[:400]], group="sweep-10")
            at_step(d, "sw-d", 400)
            wait_for(lambda: dd.poll() or [x for x in got if x["kind"] == "behind"], 15, 0.05, "behind sw-c")
            for step, loss in enumerate(curve(3)[400:], 401):   # sw-c goes on, now 0.5 higher
                c.loss(step, loss + 0.5)
            at_step(d, "sw-c", STEPS)
            for step, loss in enumerate(curve(2)[400:], 401):
                dd.loss(step, loss + 0.5)
            at_step(d, "sw-d", STEPS)
            wait_for(lambda: dd.poll() or [x for x in got if x["kind"] == "behind" and x["status"] == "resolved"],
                     15, 0.05, "the behind page resolved")
            assert sample(d, "wtwind_references_replaced_total") >= 1
            c.close(), dd.close()


class TestRestart:
    def test_reference_survives_restart(self, tmp_path):
        """After a restart the run's references are resolved again (from the store)."""
        d = Daemon(tmpdir=str(tmp_path)).start()
        try:
            a, _ = send_run(d.ipc, "run-a", curve(1))
            at_step(d, "run-a", STEPS)
            a.close()
            b, _ = send_run(d.ipc, "run-b", curve(2)[:600], reference="run-a")
            at_step(d, "run-b", 600)
            wait_for(lambda: sample(d, "wtwind_run_behind_reference", run="run-b",
                                    reference="run-a") is not None, 15, 0.1, "compared before the restart")
            b.close()
        finally:
            d.stop()
        d2 = Daemon(tmpdir=str(tmp_path)).start()
        try:
            wait_for(lambda: d2.log().count('"event": "reference_attached"') >= 2, 15, 0.1,
                     "run-b's reference attached again after the restart")
            status, body = http_get(f"{d2.url}/api/runs/run-b")
            refs = json.loads(body)["references"]
            assert status == 200 and refs["names"] == ["run-a"]
            assert refs["verdict"]["state"] in ("ok", "behind") and "run-a" in refs["curves"]  # rebuilt, state restored
        finally:
            d2.stop()
        gone = {"WTWIND_RUNS__ENDED_TTL_S": "0", "WTWIND_RUNS__ENDED_SERIES_S": "0"}
        with Daemon(tmpdir=str(tmp_path), extra_env=gone) as d3:   # past its TTL: from the store only
            doc = json.loads(http_get(f"{d3.url}/api/runs/run-b")[1])
            assert doc["stored"] and doc["references"]["names"] == ["run-a"], doc.get("references")


class TestMalformed:
    @pytest.mark.parametrize("reference", [["x"] * 9, [""], [7], "r" * 201, {"a": 1}])
    def test_bad_reference_rejected_and_counted(self, daemon, reference):
        """A run_start with a bad reference field is rejected as bad_value/bad_type and counted."""
        before = sample(daemon, "wtwind_events_rejected_total", reason="bad_value") or 0
        before += sample(daemon, "wtwind_events_rejected_total", reason="bad_type") or 0
        with raw_dealer(daemon.ipc) as sock:
            sock.send(msgpack.packb({"v": 1, "type": "run_start", "run": "bad", "seq": 1,
                                     "reference": reference}))

            def counted():
                return ((sample(daemon, "wtwind_events_rejected_total", reason="bad_value") or 0)
                        + (sample(daemon, "wtwind_events_rejected_total", reason="bad_type") or 0)) > before
            wait_for(counted, 10, 0.05, "the reject counted")

    def test_emitter_refuses_bad_names_in_plain_words(self):
        with pytest.raises(ValueError, match="at most 8"):
            wire.reference_fields(["x"] * 9, None)
        with pytest.raises(ValueError, match="group must be"):
            wire.reference_fields(None, "")


class TestPages:
    def test_run_page_overlays_the_reference_and_compare_marks_it(self, daemon, page):
        """A real browser: run-b's page draws run-a dashed with the gap shaded and says
        behind; /compare labels run-a as run-b's reference."""
        a, _ = send_run(daemon.ipc, "run-a", curve(1))
        at_step(daemon, "run-a", STEPS)
        b, _ = send_run(daemon.ipc, "run-b", curve(2, power=0.35), reference="run-a")
        at_step(daemon, "run-b", STEPS)
        doc = json.loads(http_get(f"{daemon.url}/api/runs/run-b")[1])["references"]
        assert doc["names"] == ["run-a"] and doc["verdict"]["state"] == "behind"
        assert len(doc["curves"]["run-a"]["step"]) <= 512
        page.goto(f"{daemon.url}/runs/run-b")
        page.wait_for_function("() => document.querySelector('#reference').textContent.includes('behind')")
        assert "run-a" in page.locator("#reference").inner_text()
        px = page.evaluate(PIXELS, [".chart-loss canvas", [GAP_SHADE]])
        assert px["colors"][0] > 500, px          # the shaded gap
        page.screenshot(path=str(SHOT), full_page=True)
        page.goto(f"{daemon.url}/compare?runs=run-b&runs=run-a")
        page.wait_for_selector("#members .run-row")
        assert "reference of run-b" in page.locator("#members").inner_text()
        a.close(), b.close()


SHOT = Path("/tmp/refsd-run-b.png")
GAP_SHADE = "#d62728"   # rgba(214,39,40,0.14): the canvas is transparent, PIXELS reads RGB
from test_web_browser import PIXELS, browser, page  # noqa: E402,F401  (the real-browser fixtures)


def test_every_alert_kind_has_a_webhook_alertname():
    """A kind without one made the webhook sink raise KeyError and dead-letter the page
    (found with `behind`)."""
    from wtwin.detect.alert import KINDS
    from wtwin.sinks.webhook import ALERTNAMES

    assert set(KINDS) <= set(ALERTNAMES), set(KINDS) - set(ALERTNAMES)
