"""Issue 22 part 5: a page names what the user sees. A slowdown that paged `plateau`
while its level climbed says the loss rose: main at cd2f8c3 said "loss stopped improving
at 3.419: it did not fall (+0.0091)", which reads as a flat loss."""

from __future__ import annotations

import random

from test_stall import law, pages


def ramp_after_stall(slope: float, seed: int):
    """The law until step 8000, then frozen with a rise of ``slope`` per step: a ramp
    too slow for the drift's gate (the harness's ramp3 cases that page `plateau`)."""
    rng = random.Random(seed)
    for t in range(1, 20001):
        yield t, law(min(t, 8000)) + max(0, t - 8000) * slope + rng.gauss(0, 0.02)


class TestRisingPlateau:
    def test_a_plateau_on_a_climbing_loss_says_it_rose(self):
        """A plateau page that comes once the climb is past its noise says the loss rose.
        The gates are held at 4 here so that the first page comes late in the climb; at
        the shipped 3 it can come while the climb is within its noise (next test)."""
        from wtwin.detect import RunMonitor

        for slope, seed in ((2e-6, 1), (5e-6, 0)):
            got = pages(ramp_after_stall(slope, seed), RunMonitor(effect={"gate": 4.0, "jump_gate": 4.0}))
            assert got, (slope, seed)
            t, kind, sev, msg = got[0]
            assert (kind, sev) == ("plateau", "warning"), got[0]   # kind and severity unchanged
            assert msg.startswith("loss rose "), msg
            assert "since it stopped improving at step" in msg and "did not fall" not in msg

    def test_a_page_before_the_climb_is_past_its_noise_says_so(self):
        """The gates of 3 page the same ramp earlier, 1120 steps after its onset, when
        it has risen +0.0033, within its noise: the page says it did not fall, not "rose"."""
        from wtwin.detect import RunMonitor

        gates_3 = {"gate": 3.0, "jump_gate": 3.0, "stall_gate": 4.0}   # shipped until 2026-12-06
        t, kind, sev, msg = pages(ramp_after_stall(2e-6, 1), RunMonitor(effect=gates_3))[0]
        assert (kind, sev) == ("plateau", "warning"), (t, msg)
        assert "did not fall (+" in msg and "within its noise" in msg and "rose" not in msg

    def test_a_frozen_loss_still_stopped_improving(self):
        """A level flat within its noise is not said to rise."""
        from test_stall import slowed

        t, kind, sev, msg = pages(slowed(0.0, 0))[0]
        assert kind == "plateau" and msg.startswith("loss stopped improving at"), msg
        assert "rose" not in msg


def test_a_page_many_times_the_runs_progress_says_so_in_plain_times():
    """MLPerf BERT (diverged): its eval loss fell 0.024 then jumped by 6.41. Main at cd2f8c3
    said "26274.5% of the run's progress"; a share over 10x reads as "263x"."""
    import pathlib
    import subprocess
    import sys

    from helpers import need_shared_data

    path = need_shared_data() / "real-logs" / "mlperf10__bert_supermicro_as2124gq_result6_aborted_diverged.csv"
    out = subprocess.run([str(pathlib.Path(sys.executable).parent / "wtwin"), "monitor", str(path)],
                         capture_output=True, text=True).stdout
    line = next(ln for ln in out.splitlines() if "divergence" in ln and "critical" in ln)
    assert "263x the run's progress, 0.0244" in line and "%" not in line, line
