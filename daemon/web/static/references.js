/* The run page's reference overlay (docs/REFERENCES.md): loaded before app.js, whose loss
   chart calls WTRefs.draw(u, references) on each draw. */
"use strict";

const WTRefs = (() => {
  /* The run's reference curves (docs/REFERENCES.md), dashed grey, with the gap where the
     run's loss is above the first reference shaded red. */
  function draw(u, refs) {
    const curves = refs && refs.curves ? Object.values(refs.curves) : [];
    if (!curves.length) return;
    const ctx = u.ctx, log = u.scales.y.distr === 3, b = u.bbox;
    const ok = y => typeof y === "number" && (!log || y > 0);
    ctx.save();
    ctx.beginPath(); ctx.rect(b.left, b.top, b.width, b.height); ctx.clip();
    const c0 = curves[0], xs = u.data[0], ys = u.data[1];
    ctx.fillStyle = "rgba(214,39,40,0.14)";
    for (let j = 0, k = 0; j + 1 < xs.length; j++) {   // the gap, at the run's own points
      while (k + 1 < c0.step.length && c0.step[k + 1] < xs[j]) k++;
      if (k + 1 >= c0.step.length || c0.step[k] > xs[j] || !ok(ys[j]) || !ok(c0.loss[k]) || !ok(c0.loss[k + 1])) continue;
      const t = (xs[j] - c0.step[k]) / ((c0.step[k + 1] - c0.step[k]) || 1);
      const ref = c0.loss[k] + t * (c0.loss[k + 1] - c0.loss[k]);
      if (ys[j] <= ref) continue;
      const x0 = u.valToPos(xs[j], "x", true), x1 = u.valToPos(xs[j + 1], "x", true);
      const y0 = u.valToPos(ys[j], "y", true), y1 = u.valToPos(ref, "y", true);
      ctx.fillRect(x0, y0, Math.max(1, x1 - x0), y1 - y0);
    }
    ctx.setLineDash([5, 4]); ctx.lineWidth = 1.5 * devicePixelRatio;
    curves.forEach((c, i) => {
      ctx.strokeStyle = i ? "rgba(80,80,80,0.45)" : "rgba(40,40,40,0.8)";
      ctx.beginPath();
      let on = false;
      c.step.forEach((s, k) => {
        if (!ok(c.loss[k])) { on = false; return; }
        const x = u.valToPos(s, "x", true), y = u.valToPos(c.loss[k], "y", true);
        if (on) ctx.lineTo(x, y); else ctx.moveTo(x, y);
        on = true;
      });
      ctx.stroke();
    });
    ctx.restore();
  }

  return { draw };
})();
