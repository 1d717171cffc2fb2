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

  /* An axis tick: never "0" for a small non-zero value (an lr of 5e-5), short otherwise. */
  function fmtTick(x) {
    if (x === null || x === undefined || !Number.isFinite(x)) return "";
    if (x === 0) return "0";
    const a = Math.abs(x);
    if (a >= 1e5 || a < 1e-2) return x.toExponential(2).replace(/\.?0+e/, "e").replace("e+", "e");
    return String(Number(x.toPrecision(4)));
  }
  const ticks = (u, splits) => splits.map(fmtTick);
  /* A y range around the data; a constant positive series (an lr of 5e-5) gets +-20%,
     not uPlot's [0, 2x], whose ticks are only "0" and the double. */
  function around(u, lo, hi) {
    if (lo === null || hi === null) return [0, 1];
    if (lo === hi) return lo > 0 ? [lo * 0.8, hi * 1.2] : [lo - 1, hi + 1];
    const pad = (hi - lo) * 0.05;
    return [lo >= 0 && lo - pad < 0 ? 0 : lo - pad, hi + pad];
  }

  /* The last loss as text: "NaN" / "inf" where the run sent one (JSON has no NaN). */
  function lossText(p) {
    return p.loss === null && p.loss_nonfinite ? p.loss_nonfinite : fmt(p.loss);
  }

  /* A loss sparkline: an inline SVG polyline (log scale when it spans over a decade);
     a red dot where the last point is not finite. */
  function sparkline(values, w = 120, h = 26) {
    const NS = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(NS, "svg");
    svg.setAttribute("class", "spark");
    svg.setAttribute("width", w); svg.setAttribute("height", h);
    svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
    const vals = (values || []).map(v => (typeof v === "number" && Number.isFinite(v) ? v : null));
    const fin = vals.filter(v => v !== null);
    if (!fin.length) {
      if (vals.length) svg.append(dot(NS, w - 3, h / 2, "#d62728"));
      return svg;
    }
    const pos = fin.filter(v => v > 0), lo0 = Math.min(...fin), hi0 = Math.max(...fin);
    const log = pos.length === fin.length && lo0 > 0 && hi0 / lo0 > 10;
    const f = v => (log ? Math.log10(v) : v);
    const lo = f(lo0), hi = f(hi0), span = hi - lo || 1;
    const x = i => (vals.length === 1 ? w / 2 : 2 + (i * (w - 4)) / (vals.length - 1));
    const y = v => h - 2 - ((f(v) - lo) * (h - 4)) / span;
    let d = "", pen = false;
    vals.forEach((v, i) => {
      if (v === null) { pen = false; return; }
      d += `${pen ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`;
      pen = true;
    });
    const path = document.createElementNS(NS, "path");
    path.setAttribute("d", d); path.setAttribute("fill", "none");
    path.setAttribute("stroke", "#1f4e9c"); path.setAttribute("stroke-width", "1.3");
    svg.append(path);
    if (vals[vals.length - 1] === null) svg.append(dot(NS, w - 3, h / 2, "#d62728"));
    svg.setAttribute("data-points", fin.length);
    return svg;
  }

  function dot(NS, cx, cy, fill) {
    const c = document.createElementNS(NS, "circle");
    c.setAttribute("cx", cx); c.setAttribute("cy", cy); c.setAttribute("r", 2.5); c.setAttribute("fill", fill);
    c.setAttribute("class", "spark-nan");
    return c;
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
        const shard = r && r.shard ? ` · shard ${r.shard}` : "";
        if (conn) { conn.textContent = `live${shard} · updated ${new Date().toLocaleTimeString()}`; conn.className = "conn ok"; }
      } catch (e) {
        if (conn) { conn.textContent = `not updating: ${e.message}`; conn.className = "conn bad"; }
      }
      setTimeout(tick, next);
    }
    tick();
  }

  /* Info transitions (benign spikes...) collapsed into one row per kind, with a count. */
  function collapseInfo(rows) {
    const groups = new Map(), out = [];
    for (const a of rows) {
      if (a.severity !== "info") { out.push(a); continue; }
      let g = groups.get(a.kind);
      if (!g) {
        g = { kind: a.kind, severity: "info", n: 0, steps: [], message: a.message, collapsed: true, newest: -Infinity };
        groups.set(a.kind, g);
        out.push(g);
      }
      if (a.status === "firing") {
        g.n++; g.steps.push(a.step);
        if (!(a.step < g.newest)) { g.newest = a.step; g.message = a.message; }   // newest firing
      }
    }
    for (const g of groups.values()) {
      const lo = Math.min(...g.steps), hi = Math.max(...g.steps);
      g.step = g.steps.length ? (lo === hi ? `${lo}` : `${lo}…${hi}`) : "";
      g.status = `×${g.n}`;
      g.message = g.n === 1 ? g.message : `${g.n} info ${g.kind} alerts; the newest: ${g.message}`;
    }
    return out;
  }

  /* A page's sentence with its runbook link clickable; its statistics (`details`: scores,
     CUSUMs, noise units) folded away under it. */
  function message(text, details) {
    const cell = el("span", { class: "message" });
    const parts = String(text || "").split(/(https?:\/\/[^\s]+?)(?=[.,;)]?(?:\s|$))/);
    parts.forEach((part, i) => cell.append(i % 2
      ? el("a", { href: part, class: "runbook", target: "_blank", rel: "noopener", text: "runbook" })
      : document.createTextNode(part)));
    if (!details) return cell;
    return el("span", {}, cell, el("details", { class: "stats" },
      el("summary", { text: "details" }), el("code", { text: details })));
  }

  function alertTable(rows, empty) {
    if (!rows.length) return el("p", { class: "muted", text: empty });
    const tb = el("tbody");
    for (const a of collapseInfo(rows)) {
      tb.append(el("tr", { class: `sev-row-${a.severity}${a.collapsed ? " collapsed" : ""}`, "data-kind": a.kind },
        el("td", { class: "num", text: a.step }),
        el("td", { text: a.kind }),
        el("td", {}, el("span", { class: `badge sev-${a.severity}`, text: a.severity })),
        el("td", { text: a.status }),
        el("td", { class: "msg" }, message(a.message, a.details))));
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
    const none = s.step.map(() => null);
    const train = [s.step, s.loss, s.l_pred, s.band_lo, s.band_hi, s.W, s.lr || none, s.grad_norm || none];
    if (!e || !e.step.length) return train.concat([s.step.map(() => null)]);
    if (!s.step.length) return [e.step, ...train.slice(1).map(() => e.step.map(() => undefined)), e.val_loss];
    return uPlot.join([train, [e.step, e.val_loss]]);
  }

  const positive = col => col.map(v => (typeof v === "number" && v <= 0 ? null : v));
  /* step, loss, forecast, band, eval, and the loss smoothed (TensorBoard's EMA; all null
     while the smoothing is off) */
  const lossData = (d, log, smooth) => [d[0], ...[1, 2, 3, 4, 8].map(i => (log ? positive(d[i]) : d[i])),
    smooth > 0 ? (log ? positive : c => c)(WTTools.ema(d[1], smooth)) : d[0].map(() => null)];
  const scoreData = d => [d[0], d[5]];                          // step, W
  const optData = d => [d[0], d[6], d[7]];                      // step, lr, grad norm
  const hasAny = col => col.some(v => typeof v === "number");

  /* Whether a loss column spans more than a decade (the log axis then reads better). */
  function spansDecade(col) {
    const pos = col.filter(v => typeof v === "number" && v > 0);
    return pos.length > 1 && Math.max(...pos) / Math.min(...pos) > 10;
  }

  /* W's symmetric log axis: its range holds 0 (W's alarm side changes there), its ticks
     are the decades on both sides (at most about 8 labels: every other decade past that). */
  function symlogRange(u, lo, hi) {
    if (lo === null || hi === null) return [-1, 1];
    return [Math.min(lo, 0) * 1.3 - 1, Math.max(hi, 0) * 1.3 + 1];
  }

  function symlogSplits(u, axisIdx, min, max) {
    const top = v => (v >= 1 ? Math.floor(Math.log10(v)) : -1);
    const neg = top(-min), pos = top(max), step = Math.max(1, Math.ceil((neg + pos + 3) / 8));
    const out = [];
    for (let k = neg; k >= 0; k--) if ((neg - k) % step === 0) out.push(-(10 ** k));
    out.push(0);
    for (let k = 0; k <= pos; k++) if (k % step === 0) out.push(10 ** k);
    return out.filter(v => v >= min && v <= max);
  }

  /* The loss axis's range: the run's loss and eval points, and its reference curves, in
     the visible steps; never the forecast or its band, which may leave the data's range
     (a stored forecast that dives to 1e-4 must not squash the loss into one line): they
     are drawn clipped. Null when nothing is finite (uPlot's own range then). */
  function lossRange(u, log, refs) {
    const xs = u.data[0], x0 = u.scales.x.min, x1 = u.scales.x.max;
    let lo = Infinity, hi = -Infinity;
    const take = (x, y) => {
      if (typeof y !== "number" || !Number.isFinite(y) || (log && y <= 0)) return;
      if (x0 !== undefined && x0 !== null && (x < x0 || x > x1)) return;
      if (y < lo) lo = y;
      if (y > hi) hi = y;
    };
    for (const i of [1, 5]) {
      const ys = u.data[i] || [];
      for (let j = 0; j < xs.length; j++) take(xs[j], ys[j]);
    }
    for (const c of refs && refs.curves ? Object.values(refs.curves) : []) {
      c.step.forEach((s, k) => take(s, c.loss[k]));
    }
    if (!(lo <= hi)) return null;
    if (log) return [lo / 1.1, hi * 1.1];
    if (lo === hi) return lo > 0 ? [lo * 0.9, hi * 1.1] : [lo - 1, hi + 1];
    const pad = (hi - lo) * 0.05;
    return [lo >= 0 && lo - pad < 0 ? 0 : lo - pad, hi + pad];
  }

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
      const x = Math.round(u.valToPos(m.x === undefined ? m.step : m.x, "x", true));
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
      const x = u.valToPos(m.x === undefined ? m.step : m.x, "x");
      if (!(x >= -1 && x <= u.over.clientWidth + 1)) continue;
      u.over.append(el("div", {
        class: `alert-marker sev-${m.severity}`, style: `left:${x}px`,
        "data-kind": m.kind, "data-step": m.step,
        title: `${m.kind} (${m.severity}) at step ${m.step}: ${m.message || ""}`,
      }));
    }
  }

  /* The loss chart (loss, forecast + band, eval loss, alert markers), the W chart, and the
     lr / grad-norm chart (when the run sends either). The loss axis turns logarithmic by
     itself when the loss spans more than a decade, until the user chooses. */
  class RunCharts {
    constructor(root, onLog) {
      this.root = root;
      this.onLog = onLog || (() => {});
      this.markers = [];
      this.follow = true;
      this.logy = false;
      this.userLog = false;
      this.last = null;
      this.charts = [];
      this.opt = null;              // the lr / grad-norm chart, when shown
      this.xmode = "step";          // the x axis (xaxis.js): step, relative, wall, tokens
      this.xmap = null;             // step -> x for it (null: the step)
      this.scalars = [];            // one chart per scalar the trainer logs (scalars.js)
      this.timing = [];             // step time, memory (timing.js)
      this.smooth = WTTools.smoothing();
      this.pin = null;              // the step a click pinned the cursor at
      this.name = "run";            // exported files are named <name>-<chart>
      root.runCharts = this;        // for the browser tests: the uPlot instances and their ticks
      window.addEventListener("resize", () => this.resize());
      WTTools.onTheme(() => this.rebuild());
    }

    get loss() { return this.charts[0] || null; }

    width() { return Math.max(320, this.root.clientWidth - 4); }

    build(data) {
      this.root.textContent = "";
      const self = this;
      const sync = { key: "wtwind-run" }, t = WTTools.theme(), axis = WTTools.axis;
      const xo = WTAxis.options(this.xmode, !!this.xmap);
      const pin = WTTools.pinning(() => self.charts, step => self.pinned(step));
      const base = {
        width: this.width(), cursor: { sync, drag: { x: true, y: false }, lock: true },
        hooks: { setSelect: [() => { self.follow = false; }], ready: [pin] },
      };
      const box = cls => { const b = el("div", { class: `chart ${cls}` }); this.root.append(b); return b; };
      const marks = { draw: [u => drawMarkers(u, self.markers)] };
      this.charts = [new uPlot(Object.assign({}, base, {
        height: 340,
        scales: { x: xo.scale,
          y: { distr: this.logy ? 3 : 1, range: (u, lo, hi) => lossRange(u, self.logy, self.refs)
            || (self.logy ? [lo / 1.1, hi * 1.1] : around(u, lo, hi)) } },
        series: [
          { label: xo.axis.label },
          { label: "loss", stroke: this.smooth > 0 ? t.faint : t.loss, width: 1, spanGaps: false },
          { label: "forecast", stroke: "#2ca02c", width: 2, dash: [6, 4] },
          { label: "band low", stroke: "rgba(44,160,44,0.25)", width: 1 },
          { label: "band high", stroke: "rgba(44,160,44,0.25)", width: 1 },
          { label: "eval loss", stroke: "#9467bd", width: 0, paths: () => null,
            points: { show: true, size: 6, fill: "#9467bd" } },
          { label: "loss (smoothed)", stroke: t.loss, width: 1.5, spanGaps: true, show: this.smooth > 0 },
        ],
        bands: [{ series: [4, 3], fill: "rgba(44,160,44,0.13)" }],
        axes: [axis(xo.axis), axis({ label: this.logy ? "loss (log)" : "loss", values: ticks, size: 60 })],
        hooks: Object.assign({}, base.hooks, { draw: [shadeNonfinite, u => WTRefs.draw(u, self.refs),
          u => drawMarkers(u, self.markers)] }),
      }), lossData(data, this.logy, this.smooth), box("chart-loss"))];
      this.charts.push(new uPlot(Object.assign({}, base, {
        height: 160,
        /* W runs from about -15 to thousands: a symmetric log (asinh) axis, linear
           within +-1, so both its sign and its decades read */
        scales: { x: xo.scale, y: { distr: 4, asinh: 1, range: symlogRange } },
        series: [{ label: xo.axis.label }, { label: "W", stroke: "#c2185b", width: 1.5 }],
        axes: [axis(xo.axis), axis({ label: "W (symlog)", values: ticks, size: 60, splits: symlogSplits, filter: (u, splits) => splits })],
        hooks: Object.assign({}, base.hooks, marks),
      }), scoreData(data), box("chart-score")));
      if (hasAny(data[6]) || hasAny(data[7])) {
        this.charts.push(this.opt = new uPlot(Object.assign({}, base, {
          height: 180,
          scales: { x: xo.scale, lr: { range: around }, gn: { range: around } },
          series: [
            { label: xo.axis.label },
            { label: "lr", stroke: t.lr, width: 1.5, scale: "lr" },
            { label: "grad norm", stroke: "#e07b00", width: 1, scale: "gn" },
          ],
          axes: [axis(xo.axis), axis({ scale: "lr", label: "lr", values: ticks, size: 64, space: 20 }),
            axis({ scale: "gn", side: 1, label: "grad norm", values: ticks, size: 60, space: 20, grid: { show: false } })],
          hooks: Object.assign({}, base.hooks, marks),
        }), optData(data), box("chart-opt")));
      }
      const smoothRow = this.loss.root.querySelectorAll(".u-legend .u-series")[6];
      if (smoothRow && !(this.smooth > 0)) smoothRow.style.display = "none";   // off: not in the legend
      ["loss", "w", "lr"].forEach((what, i) => this.charts[i] &&
        WTTools.exportButtons(this.charts[i].root.parentElement, this.charts[i], () => `${self.name}-${what}`));
      const opts = { base, box, smooth: this.smooth, name: () => self.name, hooks: marks, around, ticks,
        xmap: this.xmap, xo };
      this.timing = WTTiming.build(this.last && this.last.timing, opts);   // timing.js
      this.scalars = WTScalars.build(this.last && this.last.scalars, opts);
      this.charts.push(...this.timing, ...this.scalars);
      this.pinned(null);
    }

    /* A click pinned the cursor at `step` (null: released); the legends hold its values. */
    pinned(step) {
      this.pin = step;
      if (step === null) this.root.removeAttribute("data-pinned");
      else this.root.setAttribute("data-pinned", step);
      const note = document.getElementById("pinned");
      if (note) note.textContent = step === null ? "click a chart to pin its values" : `pinned at ${WTAxis.at(this.xmap ? this.xmode : "step", step)} · click to release`;
    }

    /* After new data: the pinned cursor back at its step (the x range may have grown). */
    repin() {
      if (this.pin === null) return;
      for (const u of this.charts) {
        const i = u.valToIdx(this.pin);
        u.cursor._lock = false;
        u.setCursor({ left: u.valToPos(u.data[0][i], "x"), top: u.cursor.top > 0 ? u.cursor.top : 10 });
        u.cursor._lock = true;
      }
    }

    /* The smoothing weight (0: off) of the loss: the raw loss then stays, faint, behind. */
    setSmoothing(w) {
      const was = this.smooth > 0;
      this.smooth = w;
      if (!this.loss || was !== w > 0) return this.rebuild();
      this.loss.setData(lossData(this.xdata(columns(this.last)), this.logy, w), false);
      WTScalars.update(this.scalars, this.last.scalars, w, false, this.xmap);
    }

    rebuild() {
      const p = this.last;
      this.destroy();
      if (p) this.update(p);
    }

    /* The x axis for every chart: "step", "relative", "wall" or "tokens" (xaxis.js). */
    setX(mode) {
      this.xmode = mode;
      this.rebuild();
    }

    /* The charts' columns with their x mapped from steps to the chosen axis. */
    xdata(d) {
      if (this.xmap) d[0] = d[0].map(this.xmap);
      return d;
    }

    update(p) {
      this.last = p;
      const xon = !!this.xmap, f = WTAxis.mapper(p, this.xmode) || null;
      this.xmap = f;
      this.markers = (p.markers || []).map(m => (f ? Object.assign({}, m, { x: f(m.step) }) : m));
      this.refs = f ? null : (p.references || null);   // reference curves are by step
      const data = this.xdata(columns(p));
      if (!data[0].length) {
        this.destroy();
        this.root.replaceChildren(el("p", { class: "muted empty-chart", text: "No loss or eval events yet." }));
        return;
      }
      const wantLog = this.userLog ? this.logy : spansDecade(data[1]);
      const optShown = this.opt !== null, optWanted = hasAny(data[6]) || hasAny(data[7]);
      if (!this.loss || wantLog !== this.logy || optShown !== optWanted || xon !== !!f
          || !WTScalars.same(this.scalars, p.scalars) || !WTTiming.same(this.timing, p.timing)) {
        if (wantLog !== this.logy) { this.logy = wantLog; this.onLog(wantLog); }
        this.destroy();
        return this.build(data);
      }
      const [loss, score] = this.charts, opt = this.opt;
      loss.setData(lossData(data, this.logy, this.smooth), this.follow);
      score.setData(scoreData(data), this.follow);
      if (opt) opt.setData(optData(data), this.follow);
      WTScalars.update(this.scalars, p.scalars, this.smooth, this.follow, f);
      WTTiming.update(this.timing, p.timing, this.follow, f);
      this.repin();
    }

    setLog(on) {
      this.userLog = true;
      this.logy = on;
      this.rebuild();
    }

    destroy() {
      for (const u of this.charts) u.destroy();
      this.charts = [];
      this.opt = null;
      this.scalars = [];
      this.timing = [];
      this.follow = true;
    }

    reset() {
      this.follow = true;
      for (const u of this.charts) u.setData(u.data, true);
    }

    resize() {
      for (const u of this.charts) u.setSize({ width: this.width(), height: u.height });
    }
  }

  return { el, fmt, fmtTick, ticks, ago, getJSON, badges, poll, alertTable, message, RunCharts, SEVERITIES, lossRange,
    forecastWait, sparkline, lossText, spansDecade };
})();
