/* Overlay the loss of two or more runs (?runs=a&runs=b&x=step|tokens) on one chart. */
"use strict";
(() => {
  const { el, fmt, getJSON, poll, ticks, lossText, spansDecade } = WT;
  const COLORS = ["#1f4e9c", "#d62728", "#2ca02c", "#9467bd", "#e07b00", "#17becf", "#8c564b", "#e377c2"];
  const color = i => (i % COLORS.length ? COLORS[i % COLORS.length] : WTTools.theme().loss);   // the first: the theme's
  const params = new URLSearchParams(location.search);
  const names = [...new Set(params.getAll("runs"))].slice(0, 12);
  const xSel = document.getElementById("x"), logy = document.getElementById("logy");
  xSel.value = params.get("x") === "tokens" ? "tokens" : "step";
  let plot = null, shape = "", userLog = false, follow = true, last = null;
  let smooth = WTTools.smoothingControl(w => { smooth = w; if (last) draw(last); });
  document.getElementById("title").textContent = `Compare ${names.length} runs`;

  function table(x, runs) {       // one run's [x, loss], rows without an x dropped
    const xs = [], ys = [];
    runs.series[x].forEach((v, i) => { if (typeof v === "number") { xs.push(v); ys.push(runs.series.loss[i]); } });
    return [xs, ys];
  }

  /* The compared runs that name ``name`` as their reference (docs/REFERENCES.md). */
  const refOf = (runs, name) => runs.filter(r => r.references && r.references.names.includes(name)).map(r => r.run);

  function draw(runs) {
    const tokensFor = runs.filter(r => r.series.tokens && r.series.tokens.some(v => typeof v === "number"));
    const x = xSel.value === "tokens" && tokensFor.length === runs.length ? "tokens" : "step";
    const notes = [];
    if (xSel.value === "tokens" && x !== "tokens") {
      const without = runs.filter(r => !tokensFor.includes(r)).map(r => r.run);
      notes.push(`By step: ${without.join(", ")} sent no tokens (the loss event's optional "tokens" field).`);
    }
    const stored = runs.filter(r => r.stored).map(r => r.run);
    if (stored.length) notes.push(`${stored.join(", ")}: from the store: the whole run as the lowest and highest loss of each stretch of steps (peaks kept).`);
    document.getElementById("notes").replaceChildren(...notes.map(t => el("p", { class: "notice", text: t })));
    const data = uPlot.join(runs.map(r => table(x, r)));
    const log = userLog ? logy.checked : runs.some(r => spansDecade(r.series.loss));
    logy.checked = log;
    const pos = col => col.map(v => (typeof v === "number" && v <= 0 ? null : v));
    /* with the smoothing on: each run's loss smoothed (its own points: the others' rows
       are gaps the average steps over), drawn over its raw loss, which turns faint */
    const smoothed = smooth > 0 ? data.slice(1).map(col => WTTools.ema(col, smooth)) : [];
    const y = [...data.slice(1), ...smoothed].map(col => (log ? pos(col) : col));
    const key = `${x}|${log}|${smooth > 0}|${runs.map(r => r.run).join("|")}`;
    if (plot && key === shape) return plot.setData([data[0], ...y], follow);
    if (plot) plot.destroy();
    shape = key;
    const root = document.getElementById("chart");
    root.textContent = "";
    const box = el("div", { class: "chart chart-compare" });
    root.append(box);
    plot = new uPlot({
      width: Math.max(320, root.clientWidth - 4), height: 420,
      cursor: { drag: { x: true, y: false } }, hooks: { setSelect: [() => { follow = false; }] },
      scales: { x: { time: false }, y: log ? { distr: 3, range: (u, lo, hi) => [lo / 1.1, hi * 1.1] } : { distr: 1 } },
      series: [{ label: x }, ...runs.map((r, i) => ({ label: refOf(runs, r.run).length ? `${r.run} (reference)` : r.run,
        stroke: smooth > 0 ? `${color(i)}40` : color(i), width: 1.3, spanGaps: true, dash: refOf(runs, r.run).length ? [6, 4] : undefined })),
      ...smoothed.map((_, i) => ({ label: `${runs[i].run} (smoothed)`, stroke: color(i), width: 1.5, spanGaps: true,
        dash: refOf(runs, runs[i].run).length ? [6, 4] : undefined }))],
      axes: [WTTools.axis({ label: x, values: ticks }), WTTools.axis({ label: log ? "loss (log)" : "loss", values: ticks, size: 60 })],
    }, [data[0], ...y], box);
    root.plot = plot;              // for the browser tests: the uPlot instance
    WTTools.exportButtons(box, plot, () => `compare-${x}`);
  }

  function members(runs) {
    document.querySelector("#members tbody").replaceChildren(...runs.map((r, i) =>
      el("tr", { class: "run-row", "data-run": r.run },
        el("td", {}, el("span", { class: "swatch", style: `background:${color(i)}` })),
        el("td", {}, el("a", { href: `/runs/${encodeURIComponent(r.run)}`, text: r.run }),
          ...(refOf(runs, r.run).length ? [el("span", { class: "muted", text: ` reference of ${refOf(runs, r.run).join(", ")}` })] : [])),
        el("td", {}, el("span", { class: `status status-${r.status}`, text: r.status })),
        el("td", { class: "num", text: r.step === null ? "–" : r.step }),
        el("td", { class: "num", text: lossText(r) }),
        el("td", { class: "num", text: r.series.step.length }))));
  }

  async function load() {
    if (names.length < 2) {
      document.getElementById("notes").replaceChildren(el("p", { class: "error",
        text: "Pick two or more runs to compare (tick them on the run list)." }));
      return null;
    }
    const got = await Promise.all(names.map(n => getJSON(`/api/runs/${encodeURIComponent(n)}`).catch(e => ({ run: n, error: e.message }))));
    const bad = got.filter(r => r.error);
    const runs = got.filter(r => !r.error);
    last = runs;
    members(runs);
    draw(runs);
    if (bad.length) document.getElementById("notes").append(...bad.map(r => el("p", { class: "error", text: `${r.run}: ${r.error}` })));
    return { poll_ms: 2000 };
  }

  xSel.addEventListener("change", () => {
    const p = new URLSearchParams(location.search);
    p.set("x", xSel.value);
    history.replaceState(null, "", `/compare?${p}`);
    if (last) draw(last);
  });
  logy.addEventListener("change", () => { userLog = true; if (last) draw(last); });
  document.getElementById("reset").addEventListener("click", () => { follow = true; if (plot) plot.setData(plot.data, true); });
  WTTools.onTheme(() => { shape = ""; if (last) draw(last); });
  window.addEventListener("resize", () => { if (plot) plot.setSize({ width: Math.max(320, document.getElementById("chart").clientWidth - 4), height: 420 }); });
  poll(load, 2000);
})();
