"""``wtwin monitor LOG --reference PATH``: the behind page in the text and ``--json`` output,
on generated logs and on shared real ones."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from wtwin.offline import cli

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "real-logs"


def write(path: Path, seed: int, offset_from: int | None = None, n: int = 3000, lr: bool = True) -> str:
    rng = random.Random(seed)
    with open(path, "w") as f:
        f.write("step,loss,lr\n" if lr else "step,loss\n")
        for s in range(1, n + 1):
            loss = 2 + 3 * s ** -0.5 + rng.gauss(0, 0.02)
            loss += 0.3 if offset_from is not None and s > offset_from else 0.0
            f.write(f"{s},{loss},{1e-3}\n" if lr else f"{s},{loss}\n")
    return str(path)


def monitor(capsys, *args) -> tuple[int, str]:
    rc = cli.main(["monitor", *args])
    return rc, capsys.readouterr().out


class TestReferenceFlag:
    def test_a_run_behind_its_reference_pages_in_text(self, tmp_path, capsys):
        ref, live = write(tmp_path / "run-a.csv", 0), write(tmp_path / "live.csv", 1, offset_from=1500)
        rc, out = monitor(capsys, live, "--reference", ref, "--fail-on", "warning")
        assert rc == 1
        line = next(x for x in out.splitlines() if " behind " in x)
        assert line.split()[1:3] == ["behind", "warning"] and "above run-a at step" in line
        assert 1500 < int(line.split()[0]) < 1600

    def test_json_lists_the_behind_page_and_the_last_verdict(self, tmp_path, capsys):
        ref, live = write(tmp_path / "run-a.csv", 0), write(tmp_path / "live.csv", 1, offset_from=1500)
        rc, out = monitor(capsys, live, "--reference", ref, "--json")
        res = json.loads(out)
        behind = [a for a in res["alerts"] if a["kind"] == "behind"]
        assert rc == 0 and len(behind) == 1 and behind[0]["severity"] == "warning"
        assert res["first_alert_step"] <= behind[0]["step"]
        assert res["reference"]["state"] == "behind" and res["reference"]["names"] == ["run-a"]

    def test_an_equal_run_is_silent(self, tmp_path, capsys):
        ref, live = write(tmp_path / "run-a.csv", 0), write(tmp_path / "live.csv", 1)
        rc, out = monitor(capsys, live, "--reference", ref, "--json")
        assert [a for a in json.loads(out)["alerts"] if a["kind"] == "behind"] == []

    def test_several_references(self, tmp_path, capsys):
        refs = [write(tmp_path / f"sib-{i}.csv", i) for i in range(3)]
        live = write(tmp_path / "live.csv", 9, offset_from=1000)
        rc, out = monitor(capsys, live, *(x for r in refs for x in ("--reference", r)), "--json")
        res = json.loads(out)
        assert any(a["kind"] == "behind" for a in res["alerts"])
        assert res["reference"]["names"] == ["sib-0", "sib-1", "sib-2"]

    def test_a_sweep_member_stuck_above_its_group_pages(self, tmp_path, capsys):
        """``--group``: the daemon's group siblings, offline; the siblings that match stay
        silent against each other."""
        sibs = [write(tmp_path / f"sweep-{i}.csv", i) for i in range(3)]
        stuck = write(tmp_path / "stuck.csv", 9, offset_from=800)
        rc, out = monitor(capsys, stuck, "--group", *sibs, "--fail-on", "warning")
        assert rc == 1 and "behind" in out and "above sweep-" in out
        rc, out = monitor(capsys, sibs[0], "--group", *sibs[1:], "--json")
        assert rc == 0 and not [a for a in json.loads(out)["alerts"] if a["kind"] == "behind"]

    def test_a_missing_reference_is_a_plain_error(self, tmp_path, capsys):
        live = write(tmp_path / "live.csv", 1)
        rc = cli.main(["monitor", live, "--reference", str(tmp_path / "nope.csv")])
        err = capsys.readouterr().err
        assert rc == 2 and err.startswith("wtwin: ") and "nope.csv" in err

    @pytest.mark.skipif(not SHARED.exists(), reason="needs ../shared/data beside the checkout")
    def test_shared_stuck_bert_against_a_successful_one(self):
        """The real entry point on two shared MLPerf BERT eval logs: the stuck run pages."""
        stuck = SHARED / "mlperf10__bert_supermicro_as2124gq_result1_aborted_stuck.csv"
        ok = SHARED / "mlperf10__bert_supermicro_as4124go_result1_success.csv"
        r = subprocess.run([sys.executable, "-m", "wtwin.offline.cli", "monitor", str(stuck),
                            "--reference", str(ok), "--json"], capture_output=True, text=True)
        res = json.loads(r.stdout)
        assert [(a["kind"], a["step"]) for a in res["alerts"] if a["kind"] == "behind"] == [("behind", 2344)]
