"""The daemon's Prometheus collector over a real run table: names, holds, the band."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from wtwin.daemon.metrics import DaemonCollector
from wtwin.daemon.run_table import RunTable
from wtwin.daemon.stats import Stats

T0 = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def setup(ended_series_s: float = 300.0):
    table = RunTable(preset="pretraining", cooldown_s=0.0, max_runs=100)
    clock = Clock()
    reg = CollectorRegistry()
    reg.register(DaemonCollector(table, Stats(), ended_series_s=ended_series_s, clock=clock))
    return table, clock, reg


def feed(table, run: str, events: list[dict], now: float = T0):
    r = table.get_or_create(run, now)
    out = []
    for ev in events:
        out += r.observe(ev, now)
    return r, out


def losses(values, start: int = 1) -> list[dict]:
    return [{"type": "loss", "step": start + i, "loss": v} for i, v in enumerate(values)]


class TestEndedRunHold:
    def test_a_run_that_nans_and_exits_keeps_its_alert_for_the_hold(self):
        """NaN, then run_end(failed) at once: alert_active stays 1 until ended_series_s passes."""
        table, clock, reg = setup(ended_series_s=300.0)
        feed(table, "nan", [{"type": "run_start", "config": {}}, *losses([2.0, 1.9, float("nan")]),
                            {"type": "run_end", "status": "failed"}])
        labels = {"run": "nan", "kind": "nonfinite"}
        clock.now = T0 + 299
        assert reg.get_sample_value("wtwind_run_alert_active", labels) == 1
        assert reg.get_sample_value("wtwind_run_alert_severity", labels) == 3
        assert reg.get_sample_value("wtwind_run_status", {"run": "nan", "status": "failed"}) == 1
        assert reg.get_sample_value("wtwind_run_status", {"run": "nan", "status": "running"}) == 0
        assert reg.get_sample_value("wtwind_run_step", {"run": "nan"}) == 3
        clock.now = T0 + 301
        assert reg.get_sample_value("wtwind_run_alert_active", labels) is None
        assert reg.get_sample_value("wtwind_run_step", {"run": "nan"}) is None

    def test_a_clean_end_drops_the_series_at_once(self):
        table, clock, reg = setup()
        feed(table, "ok", [*losses([2.0, 1.9, 1.8]), {"type": "run_end", "status": "completed"}])
        assert reg.get_sample_value("wtwind_run_step", {"run": "ok"}) is None
        assert reg.get_sample_value("wtwind_run_status", {"run": "ok", "status": "completed"}) is None

    def test_a_failed_run_without_alerts_is_held_too(self):
        """A crash with no alert: its status "failed" is there to scrape for the hold."""
        table, clock, reg = setup(ended_series_s=300.0)
        feed(table, "crash", [*losses([2.0, 1.9]), {"type": "run_end", "status": "failed"}])
        assert reg.get_sample_value("wtwind_run_status", {"run": "crash", "status": "failed"}) == 1
        assert reg.get_sample_value("wtwind_run_alert_active", {"run": "crash", "kind": "nonfinite"}) is None
        clock.now = T0 + 301
        assert reg.get_sample_value("wtwind_run_status", {"run": "crash", "status": "failed"}) is None

    def test_the_table_keeps_a_held_run_past_ended_ttl(self):
        """expire() keeps the run while its series are held, then lets it go."""
        table, clock, reg = setup()
        feed(table, "nan", [*losses([2.0, float("nan")]), {"type": "run_end", "status": "failed"}])
        feed(table, "ok", [*losses([2.0]), {"type": "run_end", "status": "completed"}])
        gone = table.expire(T0 + 120, idle_ttl_s=1e6, ended_ttl_s=60, ended_series_s=300)
        assert [r.run for r in gone] == ["ok"]
        assert [r.run for r in table.expire(T0 + 301, idle_ttl_s=1e6, ended_ttl_s=60,
                                            ended_series_s=300)] == ["nan"]

    def test_a_restarted_run_is_running_again(self):
        table, clock, reg = setup()
        r, _ = feed(table, "again", [*losses([2.0, float("nan")]), {"type": "run_end", "status": "failed"},
                                     {"type": "run_start", "config": {}}])
        assert r.ended_firing == {}
        assert reg.get_sample_value("wtwind_run_status", {"run": "again", "status": "running"}) == 1


class TestNames:
    def test_escalation_keeps_one_series_per_run_and_kind(self):
        """The series has no severity label: a warning that turns critical is the same series."""
        table, clock, reg = setup()
        feed(table, "r", [*losses([2.0, float("nan")])])
        fams = {f.name: f for f in reg.collect()}
        (sample,) = fams["wtwind_run_alert_active"].samples
        assert sample.labels == {"run": "r", "kind": "nonfinite"}

    def test_emitter_drops_are_a_counter(self):
        table, clock, reg = setup()
        feed(table, "r", [*losses([2.0]), {"type": "heartbeat", "dropped": 7}])
        assert reg.get_sample_value("wtwind_run_emitter_dropped_events_total", {"run": "r"}) == 7
        assert {f.type for f in reg.collect() if f.name == "wtwind_run_emitter_dropped_events"} == {"counter"}


class TestLowerBand:
    @staticmethod
    def _band(values):
        table, clock, reg = setup()
        feed(table, "r", losses(values))
        return reg.get_sample_value("wtwind_run_forecast_lower_loss", {"run": "r"}), table.get("r")

    def test_never_negative_while_every_loss_is_non_negative(self):
        """A cross-entropy-like loss near 0 with noise: the band's lower edge stops at 0
        (the forecast's own, issue 22; it was below 0), and so does the exported one."""
        vals = [0.5 * 0.995 ** t + 0.02 * ((t * 7919) % 13 - 6) / 6 + 0.03 for t in range(3000)]
        lo, run = self._band(vals)
        assert run.last_state.band_lo == 0.0
        assert lo == 0.0

    def test_a_loss_that_goes_negative_keeps_its_band(self):
        """An ELBO-like loss that is negative: no clamp, the band is the forecast's."""
        vals = [-1.0 - 2.0 * (1 - 0.999 ** t) + 0.05 * ((t * 7919) % 13 - 6) / 6 for t in range(3000)]
        lo, run = self._band(vals)
        assert run.nonnegative is False
        assert lo == run.last_state.band_lo
