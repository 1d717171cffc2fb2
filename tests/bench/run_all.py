"""`make bench`: run every benchmark script in tests/bench/ in turn, printing its figures."""

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
ORDER = ["ingest.py", "emitter_cost.py"]  # first; the rest alphabetically


def main() -> int:
    scripts = [HERE / n for n in ORDER if (HERE / n).exists()]
    scripts += sorted(p for p in HERE.glob("*.py")
                      if p.name not in ORDER and p.name != Path(__file__).name
                      and not p.name.startswith("_"))
    failed = 0
    for script in scripts:
        print(f"\n=== {script.name} ===", flush=True)
        failed += subprocess.call([sys.executable, str(script)]) != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
