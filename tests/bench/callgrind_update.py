"""Instructions per `RunMonitor.update_loss`, counted by callgrind: a figure that does not
move with the machine's load, for comparing two trees side by side.

    valgrind --tool=callgrind --collect-atstart=no --toggle-collect=partial_vectorcall \\
        .venv/bin/python tests/bench/callgrind_update.py 10000 20000

The `pretraining` monitor over a seeded power law with noise (2.6 + 9 t^-0.35, sd 0.02):
``WARM`` updates uncounted, then ``N`` counted. Only the calls made through a
``functools.partial`` are counted (callgrind toggles on ``partial_vectorcall``), so the
loop, the list reads and the warm-up stay out. Divide "Collected" by ``N``. Another tree:
``PYTHONPATH`` to a folder whose ``wtwin`` links that tree's packages
(`compiled_vs_base.package`).
"""

from __future__ import annotations

import functools
import random
import sys

from wtwin.detect import RunMonitor


def main(warm: int, n: int) -> None:
    rng = random.Random(0)
    mon = RunMonitor("pretraining")
    xs = [2.6 + 9.0 * t ** -0.35 + rng.gauss(0, 0.02) for t in range(1, warm + n + 1)]
    for t in range(1, warm + 1):
        mon.update_loss(t, xs[t - 1])
    counted = functools.partial(mon.update_loss)
    for t in range(warm + 1, warm + n + 1):
        counted(t, xs[t - 1])


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
