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
    /* the gap, at the run's own finite points (an eval-only row of the joined data has
       none: it is stepped over, not a white stripe), as one polygon per stretch above
       the reference (no overlapping rectangles: one even shade) */
    const pts = [];
    for (let j = 0, k = 0; j < xs.length; j++) {
      while (k + 1 < c0.step.length && c0.step[k + 1] < xs[j]) k++;
      if (k + 1 >= c0.step.length || c0.step[k] > xs[j] || !ok(ys[j]) || !ok(c0.loss[k]) || !ok(c0.loss[k + 1])) {
        if (ys[j] === null) pts.push(null);     // a non-finite loss ends a stretch
        continue;
      }
      const t = (xs[j] - c0.step[k]) / ((c0.step[k + 1] - c0.step[k]) || 1);
      pts.push([xs[j], ys[j], c0.loss[k] + t * (c0.loss[k + 1] - c0.loss[k])]);
    }
    ctx.fillStyle = "rgba(214,39,40,0.14)";
    ctx.beginPath();
    let seg = [];
    const close = () => {
      if (seg.length > 1) {
        seg.forEach(([x, y], i) => (i ? ctx.lineTo : ctx.moveTo).call(ctx, u.valToPos(x, "x", true), u.valToPos(y, "y", true)));
        for (let i = seg.length - 1; i >= 0; i--) ctx.lineTo(u.valToPos(seg[i][0], "x", true), u.valToPos(seg[i][2], "y", true));
        ctx.closePath();
      }
      seg = [];
    };
    for (const p of pts) {
      if (p && p[1] > p[2]) seg.push(p); else close();
    }
    close();
    ctx.fill();
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
