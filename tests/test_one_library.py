"""One detection library: a real log through a live daemon over real sockets and through
``wtwin monitor --json`` gives the same pages."""

import json
import subprocess
import sys

from helpers import http_get, need_shared_data, wait_for

from wtwin.offline.logs import read_log
from wtwin.emitters import connect

LOG = "real-logs-lr/mlperf20_maskrcnn_h3c_r4_nan_frozen.csv"   # a sustained jump, then frozen


def _cli(path):
    r = subprocess.run([sys.executable, "-m", "wtwin.offline.cli", "monitor", str(path), "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [(a["step"], a["kind"], a["severity"]) for a in json.loads(r.stdout)["alerts"]]


def test_daemon_and_cli_page_the_same(daemon):
    path = need_shared_data() / LOG
    log = read_log(path)
    last = None
    with connect(daemon.ipc, run="same") as emit:
        for kind, step, value, lr, grad in log.events(with_grad=True):
            emit.loss(step, value, lr=lr, grad_norm=grad)
            last = step

    def page():
        status, body = http_get(daemon.url + "/api/runs/same")
        doc = json.loads(body) if status == 200 else {}
        return doc if doc.get("step") == last else None

    markers = wait_for(page, timeout=60, what="the run at its last step")["markers"]
    live = [(m["step"], m["kind"], m["severity"]) for m in markers
            if m["status"] == "firing" and m["severity"] != "info"]
    offline = _cli(path)
    assert offline, "the log must page (else the comparison says nothing)"
    assert live == offline
