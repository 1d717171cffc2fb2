/* The run page's time and memory charts (p.timing: the loss events' step_time_s,
   data_wait_s, mem_allocated, mem_reserved, mem_total; docs/TIMING.md): seconds per step
   and of it waited for data; the accelerator's allocated and reserved bytes against its
   total. Each only when the run sends its fields; the run charts' tools (shared zoom and
   cursor, pin, CSV/PNG export). Loaded before app.js. */
"use strict";

const WTTiming = (() => {
  const has = (t, f) => !!t && (t[f] || []).some(v => typeof v === "number");
  const GIB = 2 ** 30;
  const gib = (u, splits) => splits.map(v => (typeof v === "number" ? `${Number((v / GIB).toPrecision(3))} GiB` : ""));

  /* Which charts this run's timing gives: "time", "memory". */
  function kinds(t) {
    return [...(has(t, "step_time_s") || has(t, "data_wait_s") ? ["time"] : []),
      ...(["mem_allocated", "mem_reserved", "mem_total"].some(f => has(t, f)) ? ["memory"] : [])];
  }

  function data(t, kind, xmap) {
    const x = xmap ? t.step.map(xmap) : t.step;
    return kind === "time" ? [x, t.step_time_s, t.data_wait_s] : [x, t.mem_allocated, t.mem_reserved, t.mem_total];
  }

  function build(t, { base, box, name, hooks, around, ticks, xmap, xo }) {
    const axis = WTTools.axis, theme = WTTools.theme();
    return kinds(t).map(kind => {
      const holder = box(kind === "time" ? "chart-steptime" : "chart-memory");
      const series = kind === "time"
        ? [{ label: "step time (s)", stroke: theme.loss, width: 1.5, spanGaps: true },
          { label: "data wait (s)", stroke: "#e07b00", width: 1, spanGaps: true }]
        : [{ label: "allocated", stroke: theme.loss, width: 1.5, spanGaps: true },
          { label: "reserved", stroke: "#9467bd", width: 1, spanGaps: true },
          { label: "device total", stroke: "#d62728", width: 1, dash: [6, 4], spanGaps: true }];
      const u = new uPlot(Object.assign({}, base, {
        height: 160,
        scales: { x: xo.scale, y: { range: kind === "time" ? around : (u, lo, hi) => [0, hi === null ? 1 : hi * 1.05] } },
        series: [{ label: xo.axis.label }, ...series],
        axes: [axis(xo.axis), axis(kind === "time" ? { label: "seconds", values: ticks, size: 60 }
          : { label: "memory", values: gib, size: 70 })],
        hooks: Object.assign({}, base.hooks, hooks),
      }), data(t, kind, xmap), holder);
      u.timingKind = kind;
      WTTools.exportButtons(holder, u, () => `${name()}-${kind === "time" ? "step-time" : "memory"}`);
      return u;
    });
  }

  function same(charts, t) {
    const want = kinds(t);
    return charts.length === want.length && charts.every((u, i) => u.timingKind === want[i]);
  }

  function update(charts, t, follow, xmap) {
    for (const u of charts) u.setData(data(t, u.timingKind, xmap), follow);
  }

  return { build, same, update, kinds };
})();
