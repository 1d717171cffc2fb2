/* wtwind run pages: shared helpers and the run chart (uPlot). No build step. */
"use strict";

const WT = (() => {
  const SEV = { critical: "#d62728", warning: "#e07b00", info: "#1f77b4" };
  const SEVERITIES = ["critical", "warning", "info"];

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else e.setAttribute(k, v);
    }
    for (const c of children) if (c !== null && c !== undefined) e.append(c);
    return e;
  }

  function fmt(x, digits = 4) {
    if (x === null || x === undefined || Number.isNaN(x)) return "–";
    const a = Math.abs(x);
    if (a !== 0 && (a >= 1e5 || a < 1e-3)) return x.toExponential(2);
    return String(Number(x.toPrecision(digits)));
  }

  function ago(seconds) {
    if (seconds === null || seconds === undefined) return "–";
    const s = Math.max(0, seconds);
    if (s < 60) return `${Math.round(s)} s ago`;
    if (s < 3600) return `${Math.round(s / 60)} min ago`;
    if (s < 86400) return `${(s / 3600).toFixed(1)} h ago`;
    return `${(s / 86400).toFixed(1)} d ago`;
  }

  async function getJSON(url, options) {
    const r = await fetch(url, Object.assign({ cache: "no-store" }, options || {}));
    let body = null;
    try { body = await r.json(); } catch (e) { body = null; }
    if (!r.ok) throw new Error((body && body.error) || `the daemon answered HTTP ${r.status}`);
    return body;
  }

  function badges(counts) {
    const span = el("span", { class: "badges" });
    let any = false;
    for (const s of SEVERITIES) {
      const n = (counts && counts[s]) || 0;
      if (!n) continue;
      any = true;
      span.append(el("span", { class: `badge sev-${s}`, title: `${n} ${s} alert(s) firing`, text: `${n} ${s}` }));
    }
    if (!any) span.append(el("span", { class: "badge ok", text: "none" }));
    return span;
  }

  /* Call fn now and every ms; show the connection state in #conn. */
  function poll(fn, ms) {
    const conn = document.getElementById("conn");
    async function tick() {
      let next = ms;
      try {
        const r = await fn();
        if (r && r.poll_ms) next = r.poll_ms;
        if (conn) { conn.textContent = `live · updated ${new Date().toLocaleTimeString()}`; conn.className = "conn ok"; }
      } catch (e) {
        if (conn) { conn.textContent = `not updating: ${e.message}`; conn.className = "conn bad"; }
      }
      setTimeout(tick, next);
    }
    tick();
  }

  function alertTable(rows, empty) {
    if (!rows.length) return el("p", { class: "muted", text: empty });
    const tb = el("tbody");
    for (const a of rows) {
      tb.append(el("tr", { class: `sev-row-${a.severity}` },
        el("td", { class: "num", text: a.step }),
        el("td", { text: a.kind }),
        el("td", {}, el("span", { class: `badge sev-${a.severity}`, text: a.severity })),
        el("td", { text: a.status }),
        el("td", { class: "msg", text: a.message || "" })));
    }
    return el("table", { class: "alerts" },
      el("thead", {}, el("tr", {}, ...["step", "kind", "severity", "status", "message"].map(h => el("th", { text: h })))), tb);
  }

  /* Why the chart has no forecast yet, and for how many points it waits (p.forecast_wait). */
  function forecastWait(w) {
    if (!w) return null;
    const when = w.points_to_go > 0
      ? `so it should appear at step ${w.first_step}, in about ${w.points_to_go} more point${w.points_to_go === 1 ? "" : "s"}`
      : `so it should appear at the next point`;
    return el("p", { class: "notice", id: "forecast-wait", text:
      `No forecast yet: the ${w.preset} preset fits it from step ${w.warmup} on, from at least ` +
      `${w.min_points} points logged ${w.holdout_min}+ steps before. This run has ${w.points} loss ` +
      `point${w.points === 1 ? "" : "s"}, one every ${fmt(w.every)} step${w.every === 1 ? "" : "s"}, ${when}. ` +
      `Until then the spike, divergence and NaN checks still run.` });
  }

  function columns(p) {
    const s = p.series, e = p.eval;
    const train = [s.step, s.loss, s.l_pred, s.band_lo, s.band_hi, s.W, s.lr];
    if (!e || !e.step.length) return train.concat([s.step.map(() => null)]);
    if (!s.step.length) return [e.step, ...train.slice(1).map(() => e.step.map(() => undefined)), e.val_loss];
    return uPlot.join([train, [e.step, e.val_loss]]);
  }

  const positive = col => col.map(v => (typeof v === "number" && v <= 0 ? null : v));
  const lossData = (d, log) => [d[0], ...[1, 2, 3, 4, 7].map(i => (log ? positive(d[i]) : d[i]))];  // step, loss, forecast, band, eval
  const scoreData = d => [d[0], d[5], d[6]];                   // step, W, lr

  /* Shade the x-ranges where the run's loss was non-finite (a train point with a null loss). */
  function shadeNonfinite(u) {
    const xs = u.data[0], ys = u.data[1], { top, height } = u.bbox;
    if (!ys) return;
    u.ctx.save();
    u.ctx.fillStyle = "rgba(214,39,40,0.10)";
    for (let i = 0; i < xs.length; i++) {
      if (ys[i] !== null) continue;
      let j = i;
      while (j + 1 < xs.length && typeof ys[j + 1] !== "number") j++;
      const x0 = u.valToPos(xs[i], "x", true), x1 = u.valToPos(xs[j], "x", true);
      u.ctx.fillRect(Math.floor(x0) - 1, top, Math.max(2, x1 - x0 + 2), height);
      i = j;
    }
    u.ctx.restore();
  }

  function drawMarkers(u, markers) {
    const ctx = u.ctx, { left, top, width, height } = u.bbox;
    ctx.save();
    for (const m of markers) {
      const x = Math.round(u.valToPos(m.step, "x", true));
      if (!(x >= left - 1 && x <= left + width + 1)) continue;
      const firing = m.status === "firing";
      if (m.severity === "info") continue;   // info: only the small flag on top, no line
      ctx.strokeStyle = firing ? SEV[m.severity] : "#8a8a8a";
      ctx.lineWidth = (firing ? 2 : 1) * devicePixelRatio;
      ctx.setLineDash(firing ? [] : [4 * devicePixelRatio, 4 * devicePixelRatio]);
      ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + height); ctx.stroke();
    }
    ctx.restore();
    for (const old of u.over.querySelectorAll(".alert-marker")) old.remove();
    for (const m of markers) {
      if (m.status !== "firing") continue;
      const x = u.valToPos(m.step, "x");
      if (!(x >= -1 && x <= u.over.clientWidth + 1)) continue;
      u.over.append(el("div", {
        class: `alert-marker sev-${m.severity}`, style: `left:${x}px`,
        "data-kind": m.kind, "data-step": m.step,
        title: `${m.kind} (${m.severity}) at step ${m.step}: ${m.message || ""}`,
      }));
    }
  }

  /* The loss chart (loss, forecast + band, eval loss, alert markers) and the W / LR chart. */
  class RunCharts {
    constructor(root) {
      this.root = root;
      this.markers = [];
      this.follow = true;
      this.logy = false;
      this.last = null;
      this.loss = null;
      this.score = null;
      window.addEventListener("resize", () => this.resize());
    }

    width() { return Math.max(320, this.root.clientWidth - 4); }

    build(data) {
      this.root.textContent = "";
      const lossBox = el("div", { class: "chart chart-loss" });
      const scoreBox = el("div", { class: "chart chart-score" });
      this.root.append(lossBox, scoreBox);
      const self = this;
      const sync = { key: "wtwind-run" };
      const base = {
        width: this.width(), cursor: { sync, drag: { x: true, y: false } },
        hooks: { setSelect: [() => { self.follow = false; }] },
      };
      this.loss = new uPlot(Object.assign({}, base, {
        height: 340,
        scales: { x: { time: false },
          y: this.logy ? { distr: 3, range: (u, lo, hi) => [lo / 1.1, hi * 1.1] } : { distr: 1 } },
        series: [
          { label: "step" },
          { label: "loss", stroke: "#1f4e9c", width: 1, spanGaps: false },
          { label: "forecast", stroke: "#2ca02c", width: 2, dash: [6, 4] },
          { label: "band low", stroke: "rgba(44,160,44,0.25)", width: 1 },
          { label: "band high", stroke: "rgba(44,160,44,0.25)", width: 1 },
          { label: "eval loss", stroke: "#9467bd", width: 0, paths: () => null,
            points: { show: true, size: 6, fill: "#9467bd" } },
        ],
        bands: [{ series: [4, 3], fill: "rgba(44,160,44,0.13)" }],
        axes: [{ label: "step" }, { label: "loss" }],
        hooks: Object.assign({}, base.hooks, { draw: [shadeNonfinite, u => drawMarkers(u, self.markers)] }),
      }), lossData(data, this.logy), lossBox);
      this.score = new uPlot(Object.assign({}, base, {
        height: 170,
        scales: { x: { time: false }, lr: {} },
        series: [
          { label: "step" },
          { label: "W", stroke: "#c2185b", width: 1.5 },
          { label: "lr", stroke: "#777", width: 1, scale: "lr" },
        ],
        axes: [{ label: "step" }, { label: "W" }, { scale: "lr", side: 1, label: "lr", grid: { show: false } }],
        hooks: Object.assign({}, base.hooks, { draw: [u => drawMarkers(u, self.markers)] }),
      }), scoreData(data), scoreBox);
    }

    update(p) {
      this.last = p;
      this.markers = p.markers || [];
      const data = columns(p);
      if (!data[0].length) {
        this.destroy();
        this.root.replaceChildren(el("p", { class: "muted empty-chart", text: "No loss or eval events yet." }));
        return;
      }
      if (!this.loss) return this.build(data);
      this.loss.setData(lossData(data, this.logy), this.follow);
      this.score.setData(scoreData(data), this.follow);
    }

    setLog(on) {
      this.logy = on;
      const p = this.last;
      this.destroy();
      if (p) this.update(p);
    }

    destroy() {
      for (const u of [this.loss, this.score]) if (u) u.destroy();
      this.loss = this.score = null;
      this.follow = true;
    }

    reset() {
      this.follow = true;
      for (const u of [this.loss, this.score]) if (u) u.setData(u.data, true);
    }

    resize() {
      for (const u of [this.loss, this.score]) if (u) u.setSize({ width: this.width(), height: u.height });
    }
  }

  return { el, fmt, ago, getJSON, badges, poll, alertTable, RunCharts, SEVERITIES, forecastWait };
})();
