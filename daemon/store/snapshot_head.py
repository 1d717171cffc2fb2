"""A stored snapshot's head: its plain fields, the detectors' state left as bytes.

Apart from `codec` because readers that need only the head (the owner of a stored run,
`references`) must not import what restores a whole run (which imports them back).
"""

from __future__ import annotations

from typing import Any

import msgpack


def unpack(blob: bytes):
    return msgpack.unpackb(blob, raw=False, strict_map_key=False)


def decode_head(blob: bytes) -> dict[str, Any]:
    """The snapshot with the detectors' state left as bytes (formats 2 and 3)."""
    return unpack(blob)
