"""A loss at chance pages critical (issue 36): a QLoRA fine-tune at lr 5 froze at exactly
10.3735 = ln 32000 from its second log, and no other detector saw it (flat, finite, not
above its start). The trainer names the classes (``classes``/``vocab_size``/``num_labels``
or ``chance`` in its config; the Hugging Face callback from the model's class); offline,
``--classes``/``--chance`` or the ``config.json`` beside a ``trainer_state.json``. When
nothing names them, the common class counts and vocabularies are guessed, more strictly
(`COMMON_CLASSES`): the QLoRA log alone, as the hidden sets score it, pages at its third
point at chance, and no shared log crosses such a level for two points in a row."""

from __future__ import annotations

import json
import math
import random

import pytest

from helpers import Daemon, wait_for
from test_offline_cli import wtwin
from wtwin.detect import RunMonitor
from wtwin.detect.replay import alerts
from corpus import manifest_rows, require_data
from wtwin.detect.chance import COMMON_CLASSES, ChanceDetector, chance_of
from wtwin.offline.logs import read_log
from wtwin.emitters import connect
from wtwin.emitters.model_classes import classes_of

LN32K = math.log(32000)
QLORA = [10.3735] * 10          # the case: printed at 4 decimals, from its second log on


def _fired(losses, **overrides):
    mon, out = RunMonitor("finetuning", **overrides), []
    for s, x in enumerate(losses, 1):
        out += [(s, f.kind, f.severity) for f in mon.update_loss(s, x).findings if f.active]
    return out


class TestChanceOf:
    @pytest.mark.parametrize("config,level", [
        ({"vocab_size": 32000}, LN32K), ({"classes": 10}, math.log(10)),
        ({"num_labels": 3}, math.log(3)), ({"chance": 2.5}, 2.5),
        ({"classes": 10, "vocab_size": 30522}, math.log(10)),   # the callback's word first
        ({}, 0.0), ({"vocab_size": True}, 0.0), ({"vocab_size": "32000"}, 0.0),
        ({"vocab_size": 1}, 0.0), ({"chance": float("nan")}, 0.0), ({"chance": -1.0}, 0.0),
        ("not a dict", 0.0)])
    def test_a_config_names_its_chance_level_or_nothing(self, config, level):
        assert chance_of(config) == pytest.approx(level)

    @pytest.mark.parametrize("cls,config,n", [
        ("LlamaForCausalLM", {"vocab_size": 32000}, 32000),
        ("PeftModelForCausalLM", {"vocab_size": 32000}, 32000),
        ("BertForSequenceClassification", {"vocab_size": 30522, "num_labels": 3}, 3),
        ("BertForSequenceClassification", {"num_labels": 1, "problem_type": "regression"}, None),
        ("BertModel", {"vocab_size": 30522}, None)])
    def test_the_model_class_says_what_the_loss_is_over(self, cls, config, n):
        assert classes_of(cls, config) == n


class TestDetector:
    def test_the_qlora_case_pages_critical_at_its_second_point(self):
        assert _fired(QLORA, chance={"level": LN32K})[0] == (2, "chance", "critical")

    def test_without_a_chance_level_a_common_one_is_guessed_at_the_third_point(self):
        assert _fired(QLORA)[0] == (3, "chance", "critical")
        assert not [f for f in _fired(QLORA, chance={"guess_points": 0}) if f[1] == "chance"]

    def test_a_level_no_common_count_explains_is_not_guessed(self):
        """A small LM stuck at 4.7 (ln 110) is not at a common chance level: idle."""
        assert not [f for f in _fired([4.7] * 30) if f[1] == "chance"]

    def test_a_named_count_wins_over_the_guess(self):
        assert not [f for f in _fired(QLORA, chance={"level": math.log(10)}) if f[1] == "chance"]

    @pytest.mark.parametrize("start", [[10.8259, 10.8259], [2.3026, 2.3026]])
    def test_a_zeroed_head_two_points_at_chance_then_learning_is_silent(self, start):
        """A zero-initialized head starts at exactly ln V (ln 50304 = 10.8259); with the lr
        still 0 at its first update it is there twice, then it learns."""
        rng = random.Random(2)
        losses = start + [start[0] * (0.9 - 0.3 * (1 - math.exp(-s / 50))) + rng.gauss(0, 0.01)
                          for s in range(1, 300)]
        assert not [f for f in _fired(losses) if f[1] == "chance"]

    def test_a_model_that_starts_at_chance_and_learns_is_silent(self):
        """A language model at its random initialization starts near ln V and leaves it."""
        rng = random.Random(0)
        losses = [LN32K + 0.6 * math.exp(-s / 40) - 0.004 * s + rng.gauss(0, 0.02)
                  for s in range(1, 400)]
        assert not [f for f in _fired(losses, chance={"level": LN32K}) if f[1] == "chance"]

    def test_a_model_that_collapses_back_to_chance_pages(self):
        rng = random.Random(1)
        losses = [2.0 + 6 * (s + 5) ** -0.3 + rng.gauss(0, 0.02) for s in range(1, 300)]
        fired = _fired(losses + [LN32K + 1e-4] * 5, chance={"level": LN32K})
        assert (301, "chance", "critical") in fired

    @pytest.mark.parametrize("named", [True, False])
    def test_a_collapse_to_chance_is_one_page_that_holds(self, named):
        """A language model that fell to 2.6, then collapsed to a uniform guess over
        GPT-2's 50,257 tokens, its loss wandering a thousandth around ln V (ln 50265 and
        ln 50304, two other common vocabularies, lie within 0.0009 of it). Before: `chance`
        critical, then `spike` and `divergence` critical within 30 steps; and the verdict
        of the guess flipped 825 times as the loss wandered out of its band and back (the
        alert policy hid it here; at a point every 10 steps it paged and resolved six
        times in 8,000 steps)."""
        rng = random.Random(1)
        losses = [2.0 + 6 * (s + 5) ** -0.3 + rng.gauss(0, 0.02) for s in range(1, 300)]
        losses += [round(math.log(50257) + rng.gauss(0, 0.001), 4) for _ in range(3000)]
        kw = {"chance": {"level": math.log(50257)}} if named else {}
        found = alerts([("loss", s, x, None) for s, x in enumerate(losses, 1)], preset="finetuning", **kw)
        assert [(a.kind, a.severity, a.status) for a in found if a.severity != "info"] == \
            [("chance", "critical", "firing")], found
        det = ChanceDetector(level=kw["chance"]["level"]) if named else ChanceDetector()
        verdicts = [det.update(s, x).active for s, x in enumerate(losses, 1)]
        assert sum(a != b for a, b in zip(verdicts, verdicts[1:])) == 1

    def test_a_blow_up_that_sits_at_chance_is_paged_once_by_its_divergence(self):
        """The other order: the run-away pages `divergence` critical first; `chance` gives
        way to it (`Detector.GIVES_WAY`)."""
        rng = random.Random(2)
        losses = [2.6 + 8.2 * (1 + s / 60) ** -0.5 + rng.gauss(0, 0.04) for s in range(10, 10001, 10)]
        losses += [round(math.log(50257) + rng.gauss(0, 0.001), 4) for _ in range(1000)]
        found = alerts([("loss", 10 * i, x, None) for i, x in enumerate(losses, 1)])
        pages = [(a.kind, a.severity, a.status) for a in found if a.severity != "info"]
        assert pages == [("divergence", "critical", "firing")], pages

    @pytest.mark.parametrize("send_lr", [True, False])
    def test_a_warm_up_leaving_chance_slowly_is_silent(self, send_lr):
        """A ViT whose zeroed head starts at exactly ln 1000, its lr warming up over 6,000
        steps and a point logged every 20: 6.9078, 6.9077, 6.9075, ... stay within the
        guess's band for several points while the loss falls at each. It paged critical at
        its third point; a loss at chance since its first point that falls (or whose lr
        rises) at every point is leaving it."""
        losses, area = [], 0.0
        for step in range(1, 3001):
            lr = 1e-3 * min(1.0, step / 6000)
            area += lr
            if step == 1 or step % 20 == 0:
                losses.append((step, round(2.0 + (math.log(1000) - 2.0) * math.exp(-area / 3.0), 4), lr))
        ev = [("loss", step, x, lr if send_lr else None) for step, x, lr in losses]
        assert [e[2] for e in ev[:3]] == [6.9078, 6.9077, 6.9075]
        assert not [a for a in alerts(ev) if a.kind == "chance"]

    def test_a_loss_that_stops_at_chance_after_its_first_points_pages(self):
        """The same start, then the loss stops where it is (an lr of 0 from step 60): the
        first point that neither falls nor sees its lr rise ends the benefit of the doubt."""
        ev = [("loss", 1, 6.9078, 1e-7), ("loss", 20, 6.9077, 2e-6), ("loss", 40, 6.9076, 4e-6)]
        ev += [("loss", 40 + 20 * i, 6.9076, 4e-6) for i in range(1, 6)]
        found = [(a.kind, a.severity, a.step) for a in alerts(ev) if a.status == "firing"]
        assert ("chance", "critical", 60) in found, found

    def test_the_state_survives_a_snapshot(self):
        det = ChanceDetector(level=LN32K)
        det.update(1, 10.3735)
        again = ChanceDetector(level=LN32K)
        again.restore(det.snapshot())
        assert again.update(2, 10.3735).active


class TestOffline:
    def test_classes_on_the_command_line(self, tmp_path):
        log = tmp_path / "qlora.csv"
        log.write_text("step,loss\n" + "".join(f"{s},{x}\n" for s, x in enumerate(QLORA, 1)))
        r = wtwin("monitor", str(log), "--classes", "32000", "--fail-on", "critical")
        assert r.returncode == 1 and "ln 32000" in r.stdout, r.stdout + r.stderr
        guessed = wtwin("monitor", str(log), "--fail-on", "critical")
        assert guessed.returncode == 1 and "a common vocabulary" in guessed.stdout, guessed.stdout
        assert wtwin("monitor", str(log), "--classes", "10", "--fail-on", "critical").returncode == 0
        bad = wtwin("monitor", str(log), "--classes", "1")
        assert bad.returncode == 2 and "2 classes or more" in bad.stderr

    def test_the_model_config_beside_a_trainer_state(self, tmp_path):
        rows = [{"step": s, "loss": x, "learning_rate": 5.0} for s, x in enumerate(QLORA, 1)]
        (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": rows}))
        (tmp_path / "config.json").write_text(json.dumps(
            {"architectures": ["LlamaForCausalLM"], "vocab_size": 32000}))
        r = wtwin("monitor", str(tmp_path / "trainer_state.json"), "--json")
        res = json.loads(r.stdout)
        assert res["chance"]["level"] == pytest.approx(LN32K)
        assert [(a["kind"], a["severity"], a["step"]) for a in res["alerts"]][0] == ("chance", "critical", 2)


    def test_a_cifar10_classifier_stuck_at_chance_as_the_hidden_sets_score_it(self, tmp_path):
        """``wtwin monitor --json`` on a log alone: 10 classes, stuck at 2.3026 after 3 points."""
        losses = [2.41, 2.35, 2.31] + [2.3026] * 20
        log = tmp_path / "cifar10.csv"
        log.write_text("step,loss\n" + "".join(f"{50 * s},{x}\n" for s, x in enumerate(losses, 1)))
        res = json.loads(wtwin("monitor", str(log), "--json").stdout)
        (a,) = [a for a in res["alerts"] if a["kind"] == "chance"]
        assert (a["severity"], a["step"]) == ("critical", 300)
        assert "ln 10, a uniform guess over 10 classes" in a["message"]


def test_no_shared_log_sits_at_a_common_chance_level_for_two_points():
    """The guess's margin: a learning run crosses ``ln V`` of a common V in one point (24
    of the 103 shared logs start at or pass through one), and the guess waits for three."""
    require_data()
    levels = [math.log(v) for v in COMMON_CLASSES]
    crossed, longest = 0, 0
    for path, _row in manifest_rows():
        xs = [e[2] for e in read_log(path).events() if e[0] == "loss" and math.isfinite(e[2])]
        crossed += any(abs(x - c) <= 1e-4 * c for x in xs for c in levels)
        for c in levels:
            near = [abs(x - c) <= 1e-4 * c for x in xs]
            run = best = 0
            for n in near:
                run = run + 1 if n else 0
                best = max(best, run)
            longest = max(longest, best)
    assert crossed >= 20 and longest == 1, (crossed, longest)
    assert ChanceDetector().guess_points >= 3 * longest


def test_the_daemon_pages_the_trainer_that_named_its_vocabulary(tmp_path):
    """Real wtwind, real emitter: ``vocab_size`` in the run's config, the loss at ln 32000."""
    with Daemon(tmpdir=str(tmp_path)) as d:
        got: list[dict] = []
        emit = connect(d.ipc, run="qlora-lr5", on_alert=got.append, config={"vocab_size": 32000},
                       kind="finetuning")
        for step, loss in enumerate(QLORA, 1):
            emit.loss(step, loss)
        wait_for(lambda: emit.poll() or [a for a in got if a["kind"] == "chance"], 30, 0.05,
                 "the chance page at the trainer")
        (a,) = [a for a in got if a["kind"] == "chance"][:1]
        assert a["severity"] == "critical" and a["step"] == 2 and "ln 32000" in a["message"]
        emit.close()
