"""``python -m wtwin.emitters shard RUN [ENDPOINTS]``: which endpoint a run goes to.

ENDPOINTS as ``WTWIN_ENDPOINT`` holds them (the default), commas or whitespace between;
the answer is the pick every emitter makes for RUN (``shards.py``, docs/SHARDING.md).
"""

import sys

from .shards import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
