"""EmitterSettings (emitters/settings.py): the emitter's arguments as one frozen,
keyword-only record, checked at construction; ``Emitter(...)`` and ``connect(...)`` keep
their keywords."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from wtwin.emitters import Emitter, EmitterSettings, connect
from wtwin.emitters.null import NullEmitter

NOWHERE = "tcp://127.0.0.1:9"


class TestSettings:
    def test_frozen_and_keyword_only(self):
        s = EmitterSettings(run="r", queue_size=5)
        with pytest.raises(dataclasses.FrozenInstanceError):
            s.queue_size = 6  # type: ignore[misc]
        with pytest.raises(TypeError):
            EmitterSettings("tcp://x:1")  # type: ignore[misc]

    @pytest.mark.parametrize("kwargs, words", [
        ({"queue_size": 0}, "queue_size and batch_max must be >= 1"),
        ({"resend_size": -1}, "resend_size must be >= 0"),
        ({"endpoint": NOWHERE, "endpoints": NOWHERE}, "give endpoint or endpoints, not both"),
        ({"run": "a\nb"}, "run must be 1..200 printable characters"),
    ])
    def test_bad_arguments_are_named(self, kwargs, words):
        with pytest.raises(ValueError, match=words):
            EmitterSettings(**kwargs)

    def test_an_unknown_keyword_is_refused(self):
        with pytest.raises(TypeError, match="queue_sise"):
            Emitter(NOWHERE, run="r", queue_sise=5)

    def test_run_start_says_what_was_asked(self):
        s = EmitterSettings(run="b", config={"lr": 1e-3}, preset="finetuning", reference="a",
                            group="sweep")
        start = s.run_start()
        assert start["config"] == {"lr": 1e-3} and start["preset"] == "finetuning"
        assert start["reference"] == ["a"] and start["group"] == "sweep"
        assert "kind" not in start and "resumed_from" not in start

    def test_replay_size_is_the_old_name_of_resend_size(self):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            s = EmitterSettings.of(NOWHERE, "r", replay_size=7)
        assert s.resend_size == 7 and "resend_size" in str(seen[0].message)


class TestEmitter:
    def test_keywords_and_settings_build_the_same_emitter(self):
        """The same settings whichever way the emitter was made."""
        a = Emitter(NOWHERE, run="same", queue_size=50, linger_ms=0, heartbeat_s=3600, secret="s")
        b = Emitter.from_settings(EmitterSettings(endpoint=NOWHERE, run="same", queue_size=50,
                                                  linger_ms=0, heartbeat_s=3600, secret="s"))
        try:
            assert a.settings == b.settings and a.endpoint == b.endpoint == NOWHERE
            for i in range(60):     # the caller's queue is bounded by the setting
                a.loss(i, 1.0)
            assert a.run == b.run == "same"
        finally:
            a.close(timeout=0.1)
            b.close(timeout=0.1)

    def test_connect_passes_its_keywords_through(self, monkeypatch):
        monkeypatch.delenv("WTWIN_DISABLE", raising=False)
        monkeypatch.delenv("RANK", raising=False)
        monkeypatch.delenv("LOCAL_RANK", raising=False)
        emit = connect(NOWHERE, run="via-connect", batch_max=3, linger_ms=0, secret="s")
        try:
            assert isinstance(emit, Emitter) and emit.settings.batch_max == 3
        finally:
            emit.close(timeout=0.1)
        monkeypatch.setenv("WTWIN_DISABLE", "1")
        assert isinstance(connect(NOWHERE, run="off", batch_max=3), NullEmitter)
