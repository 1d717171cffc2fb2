/* Run list: polls /api/runs?status=&q= (live runs and the stored history), sparklines,
   a filter by status, a search by name, and "compare selected" -> /compare. A daemon
   with a shard name lists it in a column (docs/SHARDING.md). */
"use strict";
(() => {
  const { el, fmt, ago, getJSON, badges, poll, sparkline, lossText } = WT;
  const tbody = document.querySelector("#runs tbody");
  const status = document.getElementById("status"), q = document.getElementById("q");
  const compare = document.getElementById("compare");
  const selected = new Set();
  const params = new URLSearchParams(location.search);
  status.value = params.get("status") || "";
  q.value = params.get("q") || "";
  let last = null;

  function fired(counts) {
    const parts = ["critical", "warning"].filter(s => counts && counts[s]).map(s => `${counts[s]} ${s}`);
    return el("span", { class: "muted fired", text: parts.join(", ") || "–" });
  }

  function row(r, now) {
    const firing = r.firing.map(a => `${a.kind} (${a.severity}) at step ${a.step}`).join("\n");
    const alerts = r.live ? badges(r.alerts) : el("span", { class: "muted", text: "–" });
    if (firing) alerts.title = firing;
    const box = el("input", { type: "checkbox", class: "pick", "aria-label": `select ${r.run}` });
    box.checked = selected.has(r.run);
    box.addEventListener("change", () => { box.checked ? selected.add(r.run) : selected.delete(r.run); sync(); });
    return el("tr", { class: `run-row ${r.live ? "live" : "stored"}`, "data-run": r.run, "data-live": r.live },
      el("td", {}, box),
      el("td", {}, el("a", { href: `/runs/${encodeURIComponent(r.run)}`, text: r.run })),
      el("td", {}, el("span", { class: `status status-${r.status}`, text: r.status })),
      el("td", { class: "shard-col", text: r.shard || "", hidden: r.shard ? null : "" }),
      el("td", { class: "num", text: r.step === null ? "–" : r.step }),
      el("td", { class: "num", text: lossText(r) }),
      el("td", { class: "spark-cell" }, sparkline(r.spark)),
      el("td", {}, alerts),
      el("td", {}, fired(r.fired)),
      el("td", { text: ago(now - r.last_seen) }));
  }

  function sync() {
    compare.disabled = selected.size < 2;
    compare.textContent = selected.size ? `compare selected (${selected.size})` : "compare selected";
  }

  function render(data) {
    tbody.replaceChildren(...data.runs.map(r => row(r, data.now)));
    document.querySelector("#runs thead .shard-col").hidden = !data.shard;   // with shards only
    const filtered = status.value || q.value;
    document.getElementById("empty").hidden = data.runs.length > 0 || filtered;
    const live = data.runs.filter(r => r.live).length, firing = data.runs.filter(r => r.firing.length).length;
    document.getElementById("summary").textContent =
      `${data.runs.length} run(s) shown: ${live} live, ${data.runs.length - live} stored, ${firing} with active alerts` +
      (data.total > data.runs.length ? ` (${data.total - data.runs.length} more: narrow the search)` : "") +
      (data.stored ? "" : " · no store configured: ended runs leave after runs.ended_ttl_s");
  }

  let asked = 0;
  async function load() {
    const p = new URLSearchParams();
    if (status.value) p.set("status", status.value);
    if (q.value) p.set("q", q.value);
    history.replaceState(null, "", p.toString() ? `/?${p}` : "/");
    const mine = ++asked;
    const data = await getJSON(`/api/runs?${p}`);
    if (mine === asked) render(last = data);       // an older answer never overwrites a newer one
    return data;
  }

  status.addEventListener("change", () => load().catch(() => {}));
  let typing = null;
  q.addEventListener("input", () => { clearTimeout(typing); typing = setTimeout(() => load().catch(() => {}), 250); });
  document.getElementById("filters").addEventListener("submit", e => e.preventDefault());
  compare.addEventListener("click", () => {
    const p = new URLSearchParams();
    for (const r of selected) p.append("runs", r);
    location.href = `/compare?${p}`;
  });
  poll(load, 2000);
})();
