"""The offline CLI, run as a real subprocess through the installed console script."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "real-logs"
needs_data = pytest.mark.skipif(not DATA.is_dir() and os.environ.get("CI") != "true",
                                reason="../shared/data is absent")


def wtwin(*args):
    exe = pathlib.Path(sys.executable).with_name("wtwin")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "wtwin.offline.cli"]
    return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=120)


def write_run(path, drift=True):
    import random
    rng = random.Random(0)
    rows = ["step,loss,lr"]
    for t in range(1, 8001):
        d = 2e-4 * (t - 5000) if drift and t > 5000 else 0.0
        rows.append(f"{t},{2.6 + 9 * t ** -0.35 + rng.gauss(0, 0.05) + d:.5f},")
    path.write_text("\n".join(rows) + "\n")


class TestMonitorCommand:
    def test_json_shape_and_drift(self, tmp_path):
        p = tmp_path / "run.csv"
        write_run(p)
        r = wtwin("monitor", str(p), "--json")
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert {"alerts", "steps", "first_alert_step", "preset"} <= set(doc)  # new keys may be added
        assert doc["preset_from"] == "default" and doc["caveats"] == []
        assert doc["steps"] == 8000 and doc["preset"] == "pretraining"
        assert 5000 < doc["first_alert_step"] < 5800
        assert all(set(a) == {"step", "kind", "severity", "message", "details"} for a in doc["alerts"])

    def test_human_verdict_clean(self, tmp_path):
        p = tmp_path / "run.csv"
        write_run(p, drift=False)
        r = wtwin("monitor", str(p), "--preset", "pretraining")
        assert r.returncode == 0 and r.stdout.strip().splitlines()[-1].startswith("verdict: no warning")

    def test_resumed_log_is_clean(self, tmp_path):
        """A log of a run resumed from a checkpoint (steps 5001..7000 twice, with lr)
        is no alert: one info line says the detectors were rewound."""
        import lr_curves
        eta, _, noisy = lr_curves.curve("tissue", "cosine", 12000, noise=0.02, seed=1)
        steps = list(range(1, 7001)) + list(range(5001, 12001))
        p = tmp_path / "resumed.csv"
        p.write_text("step,loss,lr\n" + "".join(f"{t},{noisy[t - 1]:.5f},{eta[t - 1]:.6g}\n"
                                                 for t in steps))
        r = wtwin("monitor", str(p), "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["alerts"] == []
        r = wtwin("monitor", str(p), "--all")
        assert "step went back from 7000 to 5001" in r.stdout and "rewound to step" in r.stdout

    def test_plot_png(self, tmp_path):
        p, png = tmp_path / "run.csv", tmp_path / "out.png"
        write_run(p)
        r = wtwin("monitor", str(p), "--plot", str(png))
        assert r.returncode == 0, r.stderr
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    @pytest.mark.parametrize("content", [b"", b"step,acc\n1,2\n", b"step,loss\n1,x\n", b"\x00\x01\x02\xff" * 64])
    def test_bad_files_exit_2_one_sentence(self, tmp_path, content):
        p = tmp_path / "bad.csv"
        p.write_bytes(content)
        r = wtwin("monitor", str(p))
        assert r.returncode == 2 and r.stdout == ""
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("wtwin: ")

    def test_demo(self):
        r = wtwin("demo")
        assert r.returncode == 0 and "caught at step" in r.stdout


@needs_data
class TestRealLogsCli:
    def test_nan_run_caught_at_first_nonfinite(self):
        r = wtwin("monitor", str(DATA / "llmc__HectorFCardenas_gpt2_124M_job11672255_nan.csv"), "--json")
        doc = json.loads(r.stdout)
        assert doc["first_alert_step"] == 0 and doc["alerts"][0]["kind"] == "nonfinite"

    def test_eval_only_stuck_run_is_plateau(self):
        r = wtwin("monitor", str(DATA / "mlperf10__bert_supermicro_as2124gq_result1_aborted_stuck.csv"), "--json")
        doc = json.loads(r.stdout)
        assert doc["steps"] == 23 and doc["alerts"][0]["kind"] == "plateau"
