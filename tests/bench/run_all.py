"""`make bench`: run every benchmark script in tests/bench/ in turn, printing its figures.

    .venv/bin/python tests/bench/run_all.py [NAME ...]

With names (``compiled_core monitor_1m``), only those scripts run, in the order given.
"""

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
ORDER = ["ingest.py", "emitter_cost.py"]  # first; the rest alphabetically


def scripts(names: list[str]) -> list[Path]:
    if names:
        chosen = [HERE / (n if n.endswith(".py") else n + ".py") for n in names]
        missing = [p.name for p in chosen if not p.exists()]
        if missing:
            raise SystemExit(f"no such benchmark: {', '.join(missing)}")
        return chosen
    out = [HERE / n for n in ORDER if (HERE / n).exists()]
    return out + sorted(p for p in HERE.glob("*.py")
                        if p.name not in ORDER and p.name != Path(__file__).name
                        and not p.name.startswith("_"))


def main(argv=None) -> int:
    failed = 0
    for script in scripts(sys.argv[1:] if argv is None else argv):
        print(f"\n=== {script.name} ===", flush=True)
        failed += subprocess.call([sys.executable, str(script)]) != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
