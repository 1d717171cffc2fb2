"""Generate deploy/k8s/prometheusrule.yaml from deploy/prometheus/wtwin.rules.yml.

The PrometheusRule's ``spec`` is the rules file itself (the groups promtool tests), so
there is one source of truth. Run after editing the rules; ``--check`` exits 1 when the
committed manifest is stale (the test suite runs it). Stdlib only: the rules file's text
is placed under ``spec:`` indented, comments and all, so no YAML library is needed.

    python deploy/k8s/gen_prometheusrule.py [--check]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RULES = HERE.parent / "prometheus" / "wtwin.rules.yml"
OUT = HERE / "prometheusrule.yaml"
HEADER = ("# GENERATED from deploy/prometheus/wtwin.rules.yml by deploy/k8s/gen_prometheusrule.py;\n"
          "# do not edit. The Prometheus Operator selects rules on the release label: set it\n"
          "# to your kube-prometheus-stack release name.\n")


METADATA = """apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: wtwind
  labels:
    app.kubernetes.io/name: wtwind
    app.kubernetes.io/part-of: wtwin
    release: prometheus
spec:
"""


def render(rules_text: str) -> str:
    """The manifest: its metadata, then the rules file indented under ``spec`` (a YAML
    block mapping indented as a whole keeps its meaning, block scalars included)."""
    body = "".join(f"  {line}" if line.strip() else "\n" for line in rules_text.splitlines(keepends=True))
    return HEADER + METADATA + body


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="fail if the manifest is not up to date")
    args = p.parse_args(argv)
    text = render(RULES.read_text())
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is stale: run python {Path(__file__).relative_to(HERE.parent.parent)}",
                  file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
