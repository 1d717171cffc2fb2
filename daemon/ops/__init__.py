"""wtwind's operator commands: ``wtwind state``, ``wtwind alerts``, ``wtwind keys``.

Each command is one module with ``add_parser(sub)`` and ``run``. ``keys`` needs no
config; ``state`` and ``alerts`` read the config's store (and ``alerts`` may ask a
running daemon over HTTP).
"""

from __future__ import annotations

import argparse
import sys

from ..errors import ConfigError
from . import alerts, keys, state


def add_commands(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="command", metavar="{state,alerts,keys}")
    for command in (state, alerts, keys):
        command.add_parser(sub)


def run_keys(args) -> int:
    return keys.run(args)


def run_command(args, cfg) -> int:
    """``wtwind state ...`` or ``wtwind alerts ...`` against the config ``cfg``."""
    try:
        return (state if args.command == "state" else alerts).run(args, cfg)
    except ConfigError as exc:
        print(f"wtwind {args.command}: {exc}", file=sys.stderr)
        return 1
