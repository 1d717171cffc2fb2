"""JSON log lines are strict JSON: a NaN is a string, never a bare token (issue 23)."""

from __future__ import annotations

import io
import json

import structlog

from helpers import wait_for
from wtwin.daemon.logsetup import configure
from wtwin.emitters import connect


def strict(line: str):
    def refuse(token):
        raise ValueError(f"bare {token} in {line!r}")
    return json.loads(line, parse_constant=refuse)


class TestJsonLines:
    def test_non_finite_values_are_strings_at_any_depth(self):
        """nan, inf and -inf, top level and nested, parse as strict JSON and keep their names."""
        out = io.StringIO()
        configure("info", "json", stream=out)
        structlog.get_logger("t").warning("ev", loss=float("nan"), band=[1.0, float("inf")],
                                          fit={"c": float("-inf")}, ok=2.5)
        line = strict(out.getvalue().strip())
        assert line["loss"] == "NaN" and line["band"] == [1.0, "Infinity"]
        assert line["fit"] == {"c": "-Infinity"} and line["ok"] == 2.5

    def test_a_daemon_that_saw_a_nan_writes_only_strict_json(self, daemon):
        """A real wtwind, a NaN loss and its alert: every log line parses as strict JSON."""
        emit = connect(daemon.ipc, run="nan-log", heartbeat_s=3600)
        for step in range(1, 50):
            emit.loss(step, 3.0 - step / 100)
        emit.loss(50, float("nan"))
        assert emit.flush(20)
        emit.close()
        wait_for(lambda: "nonfinite" in daemon.log(), 20, what="the NaN alert in the log")
        lines = [ln for ln in daemon.log().splitlines() if ln.startswith("{")]
        assert lines and all(strict(ln) for ln in lines)
