/* Drop or choose a log; POST it to /api/analyze; show the same chart and the alerts. */
"use strict";
(() => {
  const { el, fmt, getJSON, alertTable, badges, RunCharts, forecastWait } = WT;
  const drop = document.getElementById("drop");
  const error = document.getElementById("error");
  const result = document.getElementById("result");
  const busy = document.getElementById("busy");
  let charts = null;

  function showError(msg) {
    error.textContent = msg;
    error.hidden = false;
    result.hidden = true;
  }

  async function analyze(file) {
    if (!file) return;
    error.hidden = true;
    busy.hidden = false;
    busy.textContent = `analysing ${file.name}…`;
    const form = new FormData();
    form.append("preset", document.getElementById("preset").value);
    form.append("file", file, file.name);
    try {
      show(await getJSON("/api/analyze", { method: "POST", body: form }));
    } catch (e) {
      // the daemon's sentences about the file start with its name: not said twice
      showError(e.message.includes(file.name) ? e.message : `${file.name}: ${e.message}`);
    } finally {
      busy.hidden = true;
    }
  }

  function show(p) {
    result.hidden = false;
    document.getElementById("result-title").textContent = p.file;
    const cols = Object.entries(p.columns).filter(([, v]) => v).map(([k, v]) => `${k}=${v}`).join(", ");
    const f = (label, value) => el("div", { class: "fact" }, el("span", { class: "label", text: label }),
      el("span", { class: "value", text: value }));
    document.getElementById("facts").replaceChildren(
      f("points", p.points), f("last step", p.step), f("last loss", fmt(p.loss)), f("preset", p.preset),
      f("columns", cols), f("took", `${p.elapsed_s} s`),
      el("div", { class: "fact" }, el("span", { class: "label", text: "alerts fired" }), badges(p.alerts)),
      ...(p.smoothed ? [f("judged", `one point in ${p.smoothed.every} of ${p.smoothed.points}: ${p.smoothed.note}`)] : []),
      ...(p.step_scale ? [f("steps", p.step_scale.note)] : []),
      ...(p.steps_in_epoch ? [f("steps", p.steps_in_epoch)] : []));
    document.getElementById("wait").replaceChildren(...[forecastWait(p.forecast_wait)].filter(Boolean));
    if (!charts) {
      const logy = document.getElementById("logy");
      charts = new RunCharts(document.getElementById("charts"), on => { logy.checked = on; });
      WTTools.smoothingControl(w => charts.setSmoothing(w));
      document.getElementById("reset").addEventListener("click", () => charts.reset());
      logy.addEventListener("change", () => charts.setLog(logy.checked));
      if (logy.checked) { charts.userLog = true; charts.logy = true; }
    }
    charts.name = String(p.file).replace(/\.[^.]*$/, "");   // exports: <file>-loss.csv
    charts.destroy();
    charts.update(p);
    const note = p.transitions_dropped ? ` (${p.transitions_dropped} more not shown)` : "";
    document.getElementById("alerts").replaceChildren(
      alertTable(p.transitions, "No alerts: the detectors found nothing wrong in this log." + note));
  }

  document.getElementById("file").addEventListener("change", e => analyze(e.target.files[0]));
  for (const ev of ["dragenter", "dragover"]) drop.addEventListener(ev, e => { e.preventDefault(); drop.classList.add("over"); });
  for (const ev of ["dragleave", "drop"]) drop.addEventListener(ev, () => drop.classList.remove("over"));
  drop.addEventListener("drop", e => {
    e.preventDefault();
    const files = e.dataTransfer && e.dataTransfer.files;
    if (!files || !files.length) return showError("Nothing was dropped: drop a file, not text or a link.");
    analyze(files[0]);
  });
  window.addEventListener("dragover", e => e.preventDefault());
  window.addEventListener("drop", e => e.preventDefault());
})();
