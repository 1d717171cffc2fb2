/* The run page's x axis (docs/RUN_PAGE.md): step, relative time, wall time, or tokens,
   for every chart at once (select#xaxis). The loss series carry each point's time
   (series.time, Unix seconds) and tokens; any other series (eval, scalars, alert markers)
   is placed by its step, through the loss series' step -> x (linear between two loss
   points, the nearest one's outside them). A history stored before times were kept has
   none: those axes say "unavailable" and the charts stay on steps. Loaded before app.js. */
"use strict";

const WTAxis = (() => {
  const LABELS = { step: "step", relative: "relative time", wall: "wall time", tokens: "tokens" };

  /* The loss series' (step, x) points, x never going back (a clock set back: flat). */
  function points(p, mode) {
    const s = p.series || {}, col = mode === "tokens" ? s.tokens : s.time;
    const steps = [], xs = [];
    let top = -Infinity;
    (s.step || []).forEach((st, i) => {
      const v = col ? col[i] : null;
      if (typeof v !== "number" || typeof st !== "number" || (steps.length && st < steps[steps.length - 1])) return;
      top = Math.max(top, v);
      steps.push(st); xs.push(top);
    });
    return { steps, xs };
  }

  /* step -> x for `mode` (null: the step itself; undefined: this run has no such x). */
  function mapper(p, mode) {
    if (!mode || mode === "step") return null;
    const { steps, xs } = points(p, mode);
    if (!steps.length) return undefined;
    const origin = mode === "relative" ? xs[0] : 0, n = steps.length;
    return step => {
      if (typeof step !== "number") return step;
      if (step <= steps[0]) return xs[0] - origin;
      if (step >= steps[n - 1]) return xs[n - 1] - origin;
      let lo = 0, hi = n - 1;
      while (hi - lo > 1) { const mid = (lo + hi) >> 1; if (steps[mid] <= step) lo = mid; else hi = mid; }
      const f = steps[hi] === steps[lo] ? 0 : (step - steps[lo]) / (steps[hi] - steps[lo]);
      return xs[lo] + f * (xs[hi] - xs[lo]) - origin;
    };
  }

  /* A relative time's tick: seconds, minutes, hours or days. */
  function duration(s) {
    if (typeof s !== "number" || !Number.isFinite(s)) return "";
    const a = Math.abs(s);
    if (a < 120) return `${Number(s.toPrecision(3))} s`;
    if (a < 7200) return `${Number((s / 60).toPrecision(3))} min`;
    if (a < 172800) return `${Number((s / 3600).toPrecision(3))} h`;
    return `${Number((s / 86400).toPrecision(3))} d`;
  }

  /* uPlot's x scale and axis options for `mode` (`on`: its x is available). */
  function options(mode, on) {
    const m = on ? mode : "step";
    const axis = { label: m === "relative" ? "relative time" : LABELS[m] };
    if (m === "relative") axis.values = (u, splits) => splits.map(duration);
    if (m === "tokens") axis.values = (u, splits) => splits.map(WT_fmtTick);
    return { scale: { time: m === "wall" }, axis };
  }
  const WT_fmtTick = x => (Math.abs(x) >= 1e5 ? x.toExponential(2).replace("e+", "e") : String(x));

  /* Where a pin stands, in the words of `mode`'s axis ("step 1200", "3.5 min", a date). */
  function at(mode, x) {
    if (mode === "relative") return duration(x);
    if (mode === "wall") return new Date(x * 1000).toLocaleString();
    if (mode === "tokens") return `tokens ${WT_fmtTick(x)}`;
    return `step ${x}`;
  }

  /* The selector: each mode this run lacks disabled and marked unavailable. */
  function control(p, onChange) {
    const sel = document.getElementById("xaxis");
    if (!sel) return null;
    if (!sel.dataset.bound) {
      sel.dataset.bound = "1";
      sel.addEventListener("change", () => onChange(sel.value));
    }
    for (const opt of sel.options) {
      const off = opt.value !== "step" && mapper(p, opt.value) === undefined;
      opt.disabled = off;
      opt.textContent = LABELS[opt.value] + (off ? " (unavailable)" : "");
    }
    return sel;
  }

  return { mapper, options, control, duration, at, LABELS };
})();
