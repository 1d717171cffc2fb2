"""Why a checkpoint cannot be analysed: the one error type of opening (``safe_open.py``)
and loading (``checkpoint.py``) it, in words meant for an operator."""

from __future__ import annotations


class CheckpointError(ValueError):
    """A checkpoint that cannot be analysed; ``reason`` is a short stable label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
