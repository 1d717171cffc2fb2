/* Run list: polls /api/runs. */
"use strict";
(() => {
  const { el, fmt, ago, getJSON, badges, poll } = WT;
  const tbody = document.querySelector("#runs tbody");

  function row(r, now) {
    const firing = r.firing.map(a => `${a.kind} (${a.severity}) at step ${a.step}`).join("\n");
    const alerts = badges(r.alerts);
    if (firing) alerts.title = firing;
    return el("tr", { class: "run-row", "data-run": r.run },
      el("td", {}, el("a", { href: `/runs/${encodeURIComponent(r.run)}`, text: r.run })),
      el("td", {}, el("span", { class: `status status-${r.status}`, text: r.status })),
      el("td", { class: "num", text: r.step === null ? "–" : r.step }),
      el("td", { class: "num", text: fmt(r.loss) }),
      el("td", {}, alerts),
      el("td", { text: ago(now - r.last_seen) }));
  }

  poll(async () => {
    const data = await getJSON("/api/runs");
    tbody.replaceChildren(...data.runs.map(r => row(r, data.now)));
    document.getElementById("empty").hidden = data.runs.length > 0;
    const firing = data.runs.filter(r => r.firing.length).length;
    document.getElementById("summary").textContent =
      `${data.runs.length} run(s), ${firing} with active alerts`;
    return data;
  }, 2000);
})();
