"""`wtwind`: run the daemon in the foreground, or check its config."""

from __future__ import annotations

import argparse
import asyncio
import sys

from .errors import ConfigError
from .version import __version__


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="wtwind", description="wtwin daemon: watches training runs")
    p.add_argument("--config", "-c", metavar="PATH", help="TOML config (default: embedded defaults)")
    p.add_argument("--shard", metavar="NAME",
                   help="this daemon's shard name (overrides [shard] name; docs/SHARDING.md)")
    p.add_argument("--check", action="store_true", help="validate the config and load every file it names (keys, token, store), then exit")
    p.add_argument("--print-config", action="store_true",
                   help="print the effective config (file + env + defaults) as TOML and exit")
    p.add_argument("--version", action="version", version=f"wtwind {__version__}")
    from .ops import add_commands  # state | alerts | keys (operator commands)

    add_commands(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from . import config as config_mod
    from . import ops

    if args.command == "keys":
        return ops.run_keys(args)

    try:
        cfg = config_mod.load(args.config, shard=args.shard)
    except ConfigError as exc:
        print(f"wtwind: config error: {exc}", file=sys.stderr)
        return 2
    if args.command is not None:
        return ops.run_command(args, cfg)
    if args.print_config:
        from .config.dump import to_toml

        print(to_toml(cfg), end="")
        return 0
    if args.check:  # every file and secret the config names, loaded as start-up would
        from .preflight import problems

        found = problems(cfg)
        for problem in found:
            print(f"wtwind: config error: {problem}", file=sys.stderr)
        if found:
            return 2
        print(f"wtwind: config OK ({args.config or 'embedded defaults'})")
        return 0
    from .logsetup import configure
    from .server import Server

    configure(cfg.log.level, cfg.log.format, shard=cfg.shard.name)
    try:
        return asyncio.run(_run(Server, cfg))
    except ConfigError as exc:
        print(f"wtwind: {exc}", file=sys.stderr)
        return 1


async def _run(server_cls, cfg) -> int:
    return await server_cls(cfg).serve()


if __name__ == "__main__":
    sys.exit(main())
