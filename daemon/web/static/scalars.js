/* The run page's charts of any other scalar the trainer logs (emit.scalar; p.scalars:
   name -> {step, value}), one chart per name under the run's own, with the same tools:
   the cursor and zoom shared with the other charts, the pin, the smoothing (the raw
   values faint behind, as the loss), CSV and PNG export. Loaded before app.js. */
"use strict";

const WTScalars = (() => {
  const names = scalars => Object.keys(scalars || {}).sort();

  /* step, value, and the value smoothed (all null while the smoothing is off) */
  function data(col, smooth, xmap) {
    return [xmap ? col.step.map(xmap) : col.step, col.value, smooth > 0 ? WTTools.ema(col.value, smooth) : col.step.map(() => null)];
  }

  /* One uPlot per name, in `box(cls)`s; `base`: the options every run chart shares. */
  function build(scalars, { base, box, smooth, name, hooks, around, ticks, xmap, xo }) {
    const t = WTTools.theme(), axis = WTTools.axis;
    return names(scalars).map(n => {
      const holder = box("chart-scalar");
      holder.setAttribute("data-scalar", n);
      const u = new uPlot(Object.assign({}, base, {
        height: 160,
        scales: { x: xo.scale, y: { range: around } },
        series: [
          { label: xo.axis.label },
          { label: n, stroke: smooth > 0 ? t.faint : t.loss, width: 1, spanGaps: false },
          { label: `${n} (smoothed)`, stroke: t.loss, width: 1.5, spanGaps: true, show: smooth > 0 },
        ],
        axes: [axis(xo.axis), axis({ label: n, values: ticks, size: 60 })],
        hooks: Object.assign({}, base.hooks, hooks),
      }), data(scalars[n], smooth, xmap), holder);
      const row = u.root.querySelectorAll(".u-legend .u-series")[2];
      if (row && !(smooth > 0)) row.style.display = "none";   // off: not in the legend
      WTTools.exportButtons(holder, u, () => `${name()}-${n}`);
      return u;
    });
  }

  /* Whether `charts` draw exactly the names of `scalars` (else the page rebuilds). */
  function same(charts, scalars) {
    const want = names(scalars);
    return charts.length === want.length && charts.every((u, i) => u.series[1].label === want[i]);
  }

  function update(charts, scalars, smooth, follow, xmap) {
    for (const u of charts) u.setData(data(scalars[u.series[1].label], smooth, xmap), follow);
  }

  return { build, same, update, names };
})();
