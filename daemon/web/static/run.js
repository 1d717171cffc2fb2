/* One run: polls /api/runs/<id>; loss vs forecast, W and LR, alerts, spectral alpha. */
"use strict";
(() => {
  const { el, fmt, ago, getJSON, poll, alertTable, message, RunCharts, forecastWait, lossText } = WT;
  const id = decodeURIComponent(location.pathname.slice("/runs/".length));
  const charts = new RunCharts(document.getElementById("charts"), on => { logy.checked = on; });
  charts.name = id;
  WTTools.smoothingControl(w => charts.setSmoothing(w));
  document.getElementById("title").textContent = id;
  document.title = `wtwind · ${id}`;
  document.getElementById("reset").addEventListener("click", () => charts.reset());
  const logy = document.getElementById("logy");
  logy.addEventListener("change", () => charts.setLog(logy.checked));

  function fact(label, value, cls) {
    return el("div", { class: `fact ${cls || ""}`, "data-fact": label }, el("span", { class: "label", text: label }),
      el("span", { class: "value", text: value }));
  }

  function facts(p) {
    const s = p.state || {};
    const ev = Object.entries(p.last_eval || {}).map(([k, v]) => `${k} ${fmt(v)}`).join(", ");
    return [fact("status", p.status, `status-${p.status}`), fact("step", p.step === null ? "–" : p.step),
      fact("loss", lossText(p), p.loss_nonfinite ? "nonfinite" : ""), fact("forecast", fmt(s.l_pred)),
      fact("band", s.band_lo === null || s.band_lo === undefined ? "–" : `${fmt(s.band_lo)} … ${fmt(s.band_hi)}`),
      fact("W", fmt(s.W)), fact("D", fmt(s.D)), fact("Q", fmt(s.Q)), fact("lr", fmt(p.lr)),
      fact("eval", ev || "–"), fact("preset", p.preset), fact("last seen", ago(p.now - p.last_seen)),
      ...(p.shard ? [fact("shard", p.shard)] : [])];
  }

  function config(cfg) {
    const entries = Object.entries(cfg || {});
    document.getElementById("config-box").hidden = !entries.length;
    document.getElementById("config").replaceChildren(...entries.map(([k, v]) =>
      el("div", { class: "fact", "data-config": k }, el("span", { class: "label", text: k }),
        el("span", { class: "value", text: typeof v === "number" ? fmt(v) : String(v) }))));
  }

  /* What the points drawn are: the store's buckets, the live series, or both. */
  function seriesCaption(p) {
    const buckets = "the lowest and highest value of each stretch of steps the store keeps";
    if (p.stored || (p.from_store && (p.series_from === undefined || p.series_from === null)))
      return `each point pair: ${buckets}`;
    if (p.series_from !== undefined && p.series_from !== null)
      return `before step ${p.series_from} (the daemon restarted): ${buckets}; from it on: every point as logged`;
    return "the newest 1,024 points as logged; older steps averaged into log-spaced bins";
  }

  /* A name used again is a new run: the earlier runs of this name, or the current one. */
  function names(n) {
    const box = document.getElementById("names");
    const link = r => el("a", { href: `/runs/${encodeURIComponent(r)}`, class: "run-link", text: r });
    const parts = [];
    if (n && n.current) parts.push("An earlier run of this name; the current run: ", link(n.current), ". ");
    if (n && n.earlier && n.earlier.length) {
      parts.push("Earlier runs of this name: ");
      n.earlier.forEach((r, i) => parts.push(...(i ? [", "] : []), link(r)));
    }
    box.hidden = !parts.length;
    box.replaceChildren(...parts);
  }

  function rewinds(list) {
    const box = document.getElementById("rewinds-box");
    box.hidden = !(list && list.length);
    if (box.hidden) return;
    const tb = el("tbody");
    for (const r of list.slice().reverse()) {
      tb.append(el("tr", {}, el("td", { class: "num", text: r.from_step }), el("td", { class: "num", text: r.step }),
        el("td", { text: r.kind || "" }), el("td", { text: r.checkpoint || "" }),
        el("td", { class: "num", text: r.lr_scale === null ? "–" : `×${fmt(r.lr_scale)}` }),
        el("td", { class: "num", text: r.count === null ? "" : r.count })));
    }
    document.getElementById("rewinds").replaceChildren(el("table", { class: "alerts" },
      el("thead", {}, el("tr", {}, ...["from step", "to step", "on alert", "checkpoint", "lr", "#"].map(h => el("th", { text: h })))), tb));
  }

  function spectral(sp) {
    const box = document.getElementById("spectral-box");
    box.hidden = !sp;
    if (!sp) return;
    document.getElementById("spectral-meta").textContent =
      `${sp.checkpoint || "checkpoint"} at step ${sp.step}` + (sp.mean_alpha ? ` · mean alpha ${fmt(sp.mean_alpha, 3)}` : "") +
      (sp.error ? ` · ${sp.error}` : "") + (sp.band ? ` · healthy band ${sp.band[0]}…${sp.band[1]}` : "");
    const tb = el("tbody");
    for (const l of sp.layers) {
      const bad = !!l.outside;
      tb.append(el("tr", { class: bad ? "alpha-bad" : "" }, el("td", { text: l.name }), el("td", { text: l.kind || "" }),
        el("td", { class: "num", text: fmt(l.alpha, 3) }), el("td", { class: "num", text: l.num_pl_spikes == null ? "–" : l.num_pl_spikes }),
        el("td", { text: l.status || "" })));
    }
    document.getElementById("spectral").replaceChildren(el("table", { class: "spectral" },
      el("thead", {}, el("tr", {}, ...["layer", "kind", "alpha", "spikes", "fit"].map(h => el("th", { text: h })))), tb));
  }

  poll(async () => {
    let p;
    try {
      p = await getJSON(`/api/runs/${encodeURIComponent(id)}`);
    } catch (e) {
      document.getElementById("facts").replaceChildren(el("p", { class: "error", text: e.message }));
      throw e;
    }
    document.getElementById("facts").replaceChildren(...facts(p));
    document.getElementById("stored").hidden = !p.stored;
    names(p.names);
    document.getElementById("series-caption").textContent = seriesCaption(p);
    config(p.config);
    rewinds(p.rewinds);
    document.getElementById("firing").replaceChildren(...p.firing.map(a =>
      el("div", { class: `banner sev-${a.severity}` }, `${a.severity}: ${a.kind} since step ${a.step}. `,
        message(a.message, a.details))));
    document.getElementById("wait").replaceChildren(...[forecastWait(p.forecast_wait)].filter(Boolean));
    WTAxis.control(p, mode => charts.setX(mode));
    charts.update(p);
    const ref = p.references;
    document.getElementById("reference").replaceChildren(...(ref ? [el("p", { class: "muted",
      text: `Reference${ref.names.length > 1 ? "s" : ""} (dashed, gap shaded): ${ref.names.join(", ") || "–"}` +
        (ref.group ? ` · group ${ref.group}` : "") + (ref.verdict ? ` · ${ref.verdict.state}: ${ref.verdict.message}` : " · not compared yet") })] : []));
    spectral(p.spectral);
    document.getElementById("history").replaceChildren(
      alertTable(p.markers.slice().reverse(), "No alerts for this run."));
    return p;
  }, 2000);
})();
