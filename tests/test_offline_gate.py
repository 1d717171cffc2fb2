"""`wtwin monitor` as a CI gate and as a first look: --fail-on, the preset a
trainer_state.json picks, caveats on short logs, the plot without matplotlib, progress."""

from __future__ import annotations

import json
import os
import fcntl
import pty
import select
import struct
import subprocess
import sys
import termios

import pytest

from test_offline_cli import wtwin, write_run
from wtwin.offline import checks as offline_checks, plot as offline_plot, progress as offline_progress
from wtwin.offline.logs import read_log
from wtwin.offline.cli import monitor_log


def nan_run(path):
    path.write_text("step,loss\n" + "".join(f"{t},{2.0 + 1 / t}\n" for t in range(1, 400)) + "400,nan\n")


class TestFailOn:
    def test_exit_status_follows_the_worst_alert(self, tmp_path):
        """Drift (warning) fails --fail-on warning, not critical; NaN (critical) fails both;
        a clean run fails neither; without --fail-on it is always 0."""
        drift, clean, nan = tmp_path / "drift.csv", tmp_path / "clean.csv", tmp_path / "nan.csv"
        write_run(drift)
        write_run(clean, drift=False)
        nan_run(nan)
        expect = {(drift, "warning"): 1, (drift, "critical"): 0, (nan, "warning"): 1,
                  (nan, "critical"): 1, (clean, "warning"): 0, (clean, "critical"): 0}
        for (path, level), code in expect.items():
            r = wtwin("monitor", str(path), "--fail-on", level)
            assert r.returncode == code, (path.name, level, r.stdout[-500:], r.stderr)
        assert wtwin("monitor", str(nan)).returncode == 0
        assert wtwin("monitor", str(nan), "--json", "--fail-on", "critical").returncode == 1

    def test_an_unreadable_log_is_still_2(self, tmp_path):
        p = tmp_path / "x.csv"
        p.write_text("step,acc\n1,2\n")
        assert wtwin("monitor", str(p), "--fail-on", "warning").returncode == 2


def trainer_state(path, max_steps: int, first_loss: float):
    hist = [{"epoch": s / 200, "learning_rate": 5e-5, "loss": first_loss * (0.9 + 0.1 * 50 / (50 + s)),
             "step": s} for s in range(10, max_steps + 1, 10)]
    path.write_text(json.dumps({"best_metric": None, "best_model_checkpoint": None, "epoch": 3.0,
                                "eval_steps": 500, "global_step": max_steps, "is_hyper_param_search": False,
                                "logging_steps": 10, "max_steps": max_steps, "num_train_epochs": 3,
                                "save_steps": 500, "total_flos": 1.0, "train_batch_size": 8,
                                "log_history": hist}))


class TestPresetFromTheLog:
    def test_a_fine_tune_state_picks_finetuning_and_says_so(self, tmp_path):
        p = tmp_path / "trainer_state.json"
        trainer_state(p, 600, 1.2)
        doc = json.loads(wtwin("monitor", str(p), "--json").stdout)
        assert doc["preset"] == "finetuning" and doc["preset_from"] == "trainer_state.json"
        out = wtwin("monitor", str(p)).stdout
        assert out.startswith("note: preset finetuning: trainer_state.json of 600 steps")

    def test_explicit_preset_always_wins(self, tmp_path):
        p = tmp_path / "trainer_state.json"
        trainer_state(p, 600, 1.2)
        doc = json.loads(wtwin("monitor", str(p), "--json", "--preset", "pretraining").stdout)
        assert doc["preset"] == "pretraining" and doc["preset_from"] == "--preset"

    def test_long_or_from_scratch_states_stay_pretraining(self, tmp_path):
        p = tmp_path / "trainer_state.json"
        for steps, first in ((50_000, 1.2), (600, 10.8)):
            trainer_state(p, steps, first)
            assert offline_checks.choose_preset(read_log(p), None) == ("pretraining", "trainer_state.json")

    def test_csv_keeps_the_pretraining_default(self, tmp_path):
        """The default for CSV is what the hidden holdouts are scored with: unchanged."""
        p = tmp_path / "short.csv"
        p.write_text("step,loss\n" + "".join(f"{t},{1.2 - t * 1e-4}\n" for t in range(1, 600)))
        doc = json.loads(wtwin("monitor", str(p), "--json").stdout)
        assert doc["preset"] == "pretraining" and doc["preset_from"] == "default"


class TestShortLogCaveat:
    def test_forty_points_rising_get_a_caveat(self, tmp_path):
        """The issue's log: 40 points from 1.7 to 6.7, no page; the output says the
        detectors were still warming up, in --json as a new key."""
        p = tmp_path / "short.csv"
        p.write_text("step,loss\n" + "".join(f"{t},{1.7 + 5.0 * (t - 1) / 39}\n" for t in range(1, 41)))
        doc = json.loads(wtwin("monitor", str(p), "--json").stdout)
        (caveat,) = doc["caveats"]
        assert "spans 39 steps (40 points)" in caveat and "forecast (300 steps)" in caveat
        human = wtwin("monitor", str(p)).stdout.splitlines()
        assert human[0].startswith("caveat: the log spans 39 steps") and human[-1].startswith("verdict:")

    def test_a_long_log_has_none(self, tmp_path):
        p = tmp_path / "run.csv"
        write_run(p, drift=False)
        assert json.loads(wtwin("monitor", str(p), "--json").stdout)["caveats"] == []


class TestPlot:
    def test_without_matplotlib_an_install_hint(self, tmp_path):
        p = tmp_path / "run.csv"
        write_run(p, drift=False)
        code = ("import sys; sys.modules['matplotlib'] = None; "
                "from wtwin.offline.cli import main; "
                f"sys.exit(main(['monitor', {str(p)!r}, '--plot', {str(tmp_path / 'o.png')!r}]))")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert r.stderr.strip() == "wtwin: --plot needs matplotlib: pip install 'wtwin[plot]'"

    def test_title_and_a_legend_entry_per_alert_kind(self, tmp_path):
        p = tmp_path / "nan.csv"
        nan_run(p)
        res = monitor_log(read_log(p), "pretraining", keep_series=True)
        fig = offline_plot.figure(res, str(p))
        title = fig.axes[0].get_title()
        assert title.startswith("nan.csv: 1 alert(s), first at step 400") and "preset pretraining" in title
        legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        assert "nonfinite (critical)" in legend and "loss" in legend


# `wtwin monitor` with the bar's delay at 0: the bar shows as soon as the replay starts, so
# what is tested (a bar on a terminal, none with --json, none when piped) does not hang on
# how fast this machine runs the detectors against the real 1.5 s delay
NO_DELAY = ("import sys; from wtwin.offline import progress as p; p.DELAY_S = 0.0; "
            "from wtwin.offline.cli import main; sys.exit(main(sys.argv[1:]))")


class TestProgress:
    def _run_on_a_tty(self, args):
        """stderr on a pseudo-terminal, as in a user's shell; returns what it showed."""
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 24x100
        proc = subprocess.Popen([sys.executable, "-c", NO_DELAY, *args], stdout=subprocess.PIPE,
                                stderr=slave)
        os.close(slave)
        chunks = []
        while True:  # until the child exits and the terminal has nothing more to read
            ready, _, _ = select.select([master], [], [], 0.1)
            data = b""
            if ready:
                try:
                    data = os.read(master, 4096)
                except OSError:  # EIO: no writer holds the terminal (yet, or any more)
                    pass
            chunks.append(data)
            if not data and proc.poll() is not None:
                break
        proc.wait(120)
        os.close(master)
        return proc, b"".join(chunks).decode(errors="replace")

    def test_an_analysis_shows_a_bar_on_a_terminal_only(self, tmp_path):
        """A bar on a terminal (several strides of points); none with --json; none when
        piped. Past the delay, whatever the machine's speed: the delay is set to 0."""
        p = tmp_path / "long.csv"
        n = 5 * offline_progress.STRIDE
        p.write_text("step,loss\n" + "".join(f"{t},{2.6 + 9 * t ** -0.35}\n" for t in range(1, n + 1)))
        proc, shown = self._run_on_a_tty(["monitor", str(p)])
        assert proc.returncode == 0 and "wtwin monitor" in shown and "points" in shown, shown
        proc, shown = self._run_on_a_tty(["monitor", str(p), "--json"])
        assert proc.returncode == 0 and shown == ""
        r = subprocess.run([sys.executable, "-c", NO_DELAY, "monitor", str(p)], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0 and r.stderr == ""


STOP = {"kind": "nonfinite", "severity": "critical", "step": 370, "stopped_at_step": 370,
        "message": "loss is NaN at step 370", "run": "hf-nan", "source": "daemon"}


def with_stop_entry(path, record=STOP):
    doc = json.loads(path.read_text())
    doc["log_history"].append({"step": record["stopped_at_step"], "wtwin_stopped": record})
    path.write_text(json.dumps(doc))


class TestStoppedByTheCallback:
    def test_a_clean_log_passes_without_a_record(self, tmp_path):
        """The stopped log holds no NaN: without the callback's record the gate passes it
        (what issue 37 saw), so the record is what makes the difference below."""
        p = tmp_path / "trainer_state.json"
        trainer_state(p, 370, 3.0)
        assert wtwin("monitor", str(p), "--fail-on", "critical").returncode == 0

    def test_the_log_history_entry_fails_the_gate(self, tmp_path):
        """A wtwin_stopped entry in log_history: --fail-on critical exits 1, names the stop;
        the entry is not read as a loss row."""
        p = tmp_path / "trainer_state.json"
        trainer_state(p, 370, 3.0)
        with_stop_entry(p)
        r = wtwin("monitor", str(p), "--fail-on", "critical")
        assert r.returncode == 1, r.stdout + r.stderr
        assert "training was stopped at step 370 by the wtwin callback" in r.stdout
        doc = json.loads(wtwin("monitor", str(p), "--json").stdout)
        assert doc["steps"] == 37 and doc["first_alert_step"] == 370
        assert [a["kind"] for a in doc["stopped"]] == ["nonfinite"]

    def test_the_file_beside_fails_the_gate_and_counts_once(self, tmp_path):
        """wtwin_stop.json beside trainer_state.json (or beside its checkpoint-N folder)
        fails the gate; the same record in both places is one alert."""
        out = tmp_path / "out"
        ckpt = out / "checkpoint-300"
        ckpt.mkdir(parents=True)
        trainer_state(out / "trainer_state.json", 370, 3.0)
        trainer_state(ckpt / "trainer_state.json", 300, 3.0)
        (out / "wtwin_stop.json").write_text(json.dumps({"wtwin_stopped": STOP}))
        for p in (out / "trainer_state.json", ckpt / "trainer_state.json"):
            assert wtwin("monitor", str(p), "--fail-on", "critical").returncode == 1, p
        with_stop_entry(out / "trainer_state.json")
        doc = json.loads(wtwin("monitor", str(out / "trainer_state.json"), "--json").stdout)
        assert len(doc["stopped"]) == 1 and len(doc["alerts"]) == 1

    def test_a_warning_stop_fails_warning_not_critical(self, tmp_path):
        """The record keeps the alert's severity: a warning stop fails --fail-on warning only."""
        p = tmp_path / "trainer_state.json"
        trainer_state(p, 370, 3.0)
        with_stop_entry(p, dict(STOP, kind="drift", severity="warning"))
        assert wtwin("monitor", str(p), "--fail-on", "critical").returncode == 0
        assert wtwin("monitor", str(p), "--fail-on", "warning").returncode == 1

    @pytest.mark.parametrize("bad", ['{"wtwin_stopped": {"kind": "rm -rf", "severity": "critical", '
                                     '"stopped_at_step": 1}}', "not json", '{"other": 1}',
                                     '{"wtwin_stopped": {"kind": "drift", "severity": "critical", '
                                     '"stopped_at_step": -4}}'])
    def test_a_record_that_is_not_one_is_an_error(self, tmp_path, bad):
        """A stop file the callback did not write: exit 2, naming the file; never a pass."""
        p = tmp_path / "trainer_state.json"
        trainer_state(p, 370, 3.0)
        (tmp_path / "wtwin_stop.json").write_text(bad)
        r = wtwin("monitor", str(p), "--fail-on", "critical")
        assert r.returncode == 2 and "wtwin_stop.json" in r.stderr, r.stderr
