"""``wtwin monitor --plot``: the loss against its forecast band, W below, the alerts as
vertical lines with one legend entry per alert kind. Needs matplotlib (``wtwin[plot]``)."""

from __future__ import annotations

import math
import os

INSTALL_HINT = "--plot needs matplotlib: pip install 'wtwin[plot]'"
KIND_COLORS = {"nonfinite": "black", "divergence": "red", "drift": "orange", "plateau": "purple",
               "overfit": "brown", "spike": "0.6", "stalled": "grey", "resume_jump": "teal"}


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def plot(res: dict, out: str, path: str) -> None:
    import matplotlib.pyplot as plt

    fig = figure(res, path)
    fig.savefig(out, dpi=100)
    plt.close(fig)


def figure(res: dict, path: str):
    """The figure (``res`` as ``monitor_log(keep_series=True)`` returns it)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = res["_series"]
    fig, (ax, aw) = plt.subplots(2, 1, figsize=(10, 6), sharex=True,
                                 gridspec_kw={"height_ratios": [3, 1]})
    ax.plot([r[0] for r in s], [r[1] if math.isfinite(r[1]) else float("nan") for r in s], lw=0.6,
            color="0.4", label="loss")
    fs = [r for r in s if r[2] is not None]
    if fs:
        ax.plot([r[0] for r in fs], [r[2] for r in fs], color="C0", label="forecast")
        ax.fill_between([r[0] for r in fs], [r[3] for r in fs], [r[4] for r in fs],
                        color="C0", alpha=0.2, label="band")
        aw.plot([r[0] for r in fs], [r[5] for r in fs], color="C1", lw=0.8)
    aw.axhline(0, color="k", lw=0.5)
    aw.set_ylabel("W")
    _alerts(ax, aw, res["alerts"])
    ax.set_ylabel("loss")
    ax.legend(loc="upper right", fontsize="small")
    ax.set_title(_title(res, path), fontsize="medium")
    aw.set_xlabel("step")
    fig.tight_layout()
    return fig


def _alerts(ax, aw, alerts: list[dict]) -> None:
    """One vertical line per alert, coloured by kind, dashed when critical; one legend
    entry per (kind, severity)."""
    labelled = set()
    for a in alerts:
        key = (a["kind"], a["severity"])
        color = KIND_COLORS.get(a["kind"], "C3")
        style = "-" if a["severity"] == "critical" else "--"
        label = f"{a['kind']} ({a['severity']})" if key not in labelled else None
        labelled.add(key)
        ax.axvline(a["step"], color=color, lw=0.9, ls=style, label=label)
        aw.axvline(a["step"], color=color, lw=0.9, ls=style)


def _title(res: dict, path: str) -> str:
    pages = [a for a in res["alerts"] if a["severity"] in ("warning", "critical")]
    verdict = (f"{len(pages)} alert(s), first at step {res['first_alert_step']}" if pages
               else "no warning or critical alerts")
    return f"{os.path.basename(os.fspath(path).rstrip('/'))}: {verdict} (preset {res['preset']}, {res['steps']} steps)"
