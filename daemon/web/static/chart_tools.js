/* What every chart of the pages shares with TensorBoard and W&B (docs/RUN_PAGE.md):
   the colours of the light and dark themes (prefers-color-scheme), the smoothing
   (TensorBoard's debiased EMA, its weight remembered in localStorage), CSV and PNG export,
   and a cursor that a click pins. Loaded before app.js; no build step. */
"use strict";

const WTTools = (() => {
  const DARK = "(prefers-color-scheme: dark)";
  const SMOOTH_KEY = "wtwind.smoothing";

  /* The colours the canvas needs (CSS cannot reach into it): axes, grid, the loss, the lr. */
  function theme() {
    const dark = window.matchMedia && window.matchMedia(DARK).matches;
    return dark
      ? { dark, bg: "#15191f", axis: "#c9d1d9", grid: "rgba(255,255,255,0.10)", loss: "#6ea8fe",
          faint: "rgba(110,168,254,0.28)", lr: "#b8bec6" }
      : { dark, bg: "#ffffff", axis: "#1d232b", grid: "rgba(0,0,0,0.07)", loss: "#1f4e9c",
          faint: "rgba(31,78,156,0.22)", lr: "#555555" };
  }

  /* uPlot axis options in the current theme (merged into each axis). */
  function axis(opts) {
    const t = theme();
    return Object.assign({ stroke: t.axis, grid: { stroke: t.grid, width: 1 }, ticks: { stroke: t.grid, width: 1 } }, opts);
  }

  /* Call fn when the browser's colour scheme changes (the charts rebuild in the new one). */
  function onTheme(fn) {
    if (window.matchMedia) window.matchMedia(DARK).addEventListener("change", fn);
  }

  /* TensorBoard's smoothing: an exponential moving average, debiased (the first points
     are not pulled towards 0); a non-finite or missing point stays missing and does not
     enter the average; a weight of 0 returns the values as they are. */
  function ema(ys, weight) {
    if (!(weight > 0)) return ys.slice();
    let last = 0, n = 0;
    return ys.map(y => {
      if (typeof y !== "number" || !Number.isFinite(y)) return null;
      last = last * weight + (1 - weight) * y;
      n++;
      return last / (1 - weight ** n);
    });
  }

  function smoothing() {
    let w = NaN;
    try { w = parseFloat(localStorage.getItem(SMOOTH_KEY)); } catch (e) { /* storage off: not remembered */ }
    return Number.isFinite(w) && w >= 0 && w < 1 ? w : 0;
  }

  /* The slider (input#smooth, its value in #smooth-value): calls onChange(weight) as it
     moves, and remembers the weight for every page of this daemon. */
  function smoothingControl(onChange) {
    const input = document.getElementById("smooth"), out = document.getElementById("smooth-value");
    if (!input) return 0;
    const show = w => { out.textContent = w ? w.toFixed(2) : "off"; };
    input.value = smoothing();
    show(smoothing());
    input.addEventListener("input", () => {
      const w = Math.min(0.99, Math.max(0, parseFloat(input.value) || 0));
      try { localStorage.setItem(SMOOTH_KEY, String(w)); } catch (e) { /* storage off */ }
      show(w);
      onChange(w);
    });
    return smoothing();
  }

  const safe = s => String(s).replace(/[^\w.-]+/g, "_").replace(/^_+|_+$/g, "") || "chart";

  function save(blob, filename) {
    const url = URL.createObjectURL(blob);
    const a = document.createElement("a");
    a.href = url; a.download = filename; a.hidden = true;
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
  }

  /* The series drawn, as CSV: the x column, then one column per series (its legend
     label), a row per x; an empty cell where a series has no value there. */
  function csv(u) {
    const cols = u.series.map((s, i) => [s, i]).filter(([s, i]) => i === 0 || s.show !== false);
    const cell = v => (typeof v === "number" && Number.isFinite(v) ? String(v) : "");
    const quote = t => (/[",\n]/.test(t) ? `"${t.replace(/"/g, '""')}"` : t);
    const lines = [cols.map(([s]) => quote(String(s.label))).join(",")];
    const xs = u.data[0];
    for (let j = 0; j < xs.length; j++) lines.push(cols.map(([, i]) => cell((u.data[i] || [])[j])).join(","));
    return lines.join("\n") + "\n";
  }

  /* The chart's canvas as a PNG, on the page's background (the canvas is transparent). */
  function png(u, done) {
    const src = u.ctx.canvas, c = document.createElement("canvas");
    c.width = src.width; c.height = src.height;
    const ctx = c.getContext("2d");
    ctx.fillStyle = theme().bg;
    ctx.fillRect(0, 0, c.width, c.height);
    ctx.drawImage(src, 0, 0);
    c.toBlob(done, "image/png");
  }

  /* A CSV and a PNG button above a chart's box; name(): the file name's stem. */
  function exportButtons(box, u, name) {
    const bar = document.createElement("div");
    bar.className = "chart-tools";
    const button = (kind, title, fn) => {
      const b = document.createElement("button");
      b.type = "button"; b.textContent = kind.toUpperCase(); b.title = title;
      b.dataset.export = kind;
      b.addEventListener("click", fn);
      bar.append(b);
    };
    button("csv", "the series drawn, as CSV", () =>
      save(new Blob([csv(u)], { type: "text/csv" }), `${safe(name())}.csv`));
    button("png", "this chart as a PNG image", () => png(u, blob => save(blob, `${safe(name())}.png`)));
    box.prepend(bar);
    return bar;
  }

  /* Click a chart to pin the cursor (uPlot's cursor.lock): the legends of every chart in
     `charts()` hold the values at that step until the next click. onPin(step|null).
     uPlot 1.6 keeps the lock in cursor._lock (its own click toggles it; a locked chart
     ignores the mouse and the synced cursor): a new uPlot must keep
     tests/test_web_par.py's pin test passing. */
  function pinning(charts, onPin) {
    return u => {
      u.over.addEventListener("click", () => {
        const locked = u.cursor._lock, idx = u.cursor.idx;
        const step = locked && idx !== null && idx !== undefined ? u.data[0][idx] : null;
        for (const v of charts()) {
          if (v === u) continue;
          v.cursor._lock = false;
          if (step !== null) {
            const i = v.valToIdx(step);
            v.setCursor({ left: v.valToPos(v.data[0][i], "x"), top: v.cursor.top > 0 ? v.cursor.top : 10 });
          }
          v.cursor._lock = step !== null;
        }
        onPin(step);
      });
    };
  }

  return { theme, axis, onTheme, ema, smoothing, smoothingControl, csv, png, exportButtons, pinning, save };
})();
