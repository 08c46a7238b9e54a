// A run's page: its figures, pause / resume / cancel, and the case table (filters,
// sorting), live while it runs. The stream's first message has every row; later ones
// the rows that changed.
"use strict";

const runKey = decodeURIComponent(location.pathname.split("/")[3] || "");
const query = new URLSearchParams(location.search);
const state = {
  run: null,
  rows: new Map(),
  filter: query.get("filter") || "all",
  sort: query.get("sort") || "",
  desc: query.get("desc") === "1",
  search: "",
};
const FILTERS = [
  ["all", "All"],
  ["failed", "Failed"],
  ["needs_person", "Needs a person"],
  ["errored", "Errored"],
  ["passed", "Passed"],
];

function scorers() {
  const names = new Set(Object.keys((state.run && state.run.mean_scores) || {}));
  for (const row of state.rows.values()) for (const n of Object.keys(row.scores || {})) names.add(n);
  return [...names].sort();
}

function columns() {
  return [
    { key: "case_id", label: "Case", value: (r) => r.case_id },
    { key: "status", label: "Status", value: (r) => caseGroup(r) },
    ...scorers().map((n) => ({ key: `score:${n}`, label: n, num: true, value: (r) => (r.scores || {})[n] })),
    { key: "turns", label: "Turns", num: true, value: (r) => r.turns },
    { key: "tokens", label: "Tokens", num: true, value: (r) => r.tokens },
    { key: "latency_s", label: "Latency", num: true, value: (r) => r.latency_s },
    { key: "error", label: "Error / waits for", value: (r) => r.error || "" },
  ];
}

function compareValues(a, b) {
  const missingA = a === null || a === undefined;
  const missingB = b === null || b === undefined;
  if (missingA || missingB) return missingA === missingB ? 0 : missingA ? 1 : -1; // missing last
  if (typeof a === "number" && typeof b === "number") return a - b;
  return String(a).localeCompare(String(b), undefined, { numeric: true });
}

function visibleRows() {
  const cols = columns();
  const needle = state.search.toLowerCase();
  let rows = [...state.rows.values()].filter(
    (r) => (state.filter === "all" || caseGroup(r) === state.filter) &&
      (!needle || r.case_id.toLowerCase().includes(needle)),
  );
  const col = cols.find((c) => c.key === state.sort);
  if (col) {
    rows = rows.sort((a, b) => {
      const order = compareValues(col.value(a), col.value(b));
      const missing = col.value(a) === null || col.value(a) === undefined || col.value(b) === null || col.value(b) === undefined;
      return state.desc && !missing ? -order : order;
    });
  }
  return rows;
}

function caseRow(r, cols) {
  const cells = cols.map((c) => {
    if (c.key === "case_id") {
      return el("td", {}, el("a", { href: caseUrl(runKey, r.case_id), text: r.case_id }));
    }
    if (c.key === "status") return el("td", {}, caseBadge(r));
    if (c.key.startsWith("score:")) return scoreCell(c.value(r));
    if (c.key === "latency_s") return el("td", { class: "num", text: fmt.secs(r.latency_s) });
    if (c.key === "error") {
      const kind = r.status === "needs_person" ? "error-text waits" : "error-text";
      return el("td", {}, r.error ? el("div", { class: kind, title: r.error, text: r.error }) : "");
    }
    return el("td", { class: "num", text: fmt.int(c.value(r)) });
  });
  return el("tr", { class: caseGroup(r), dataset: { case: r.case_id, group: caseGroup(r) } }, cells);
}

function renderHead(cols) {
  const row = el(
    "tr",
    {},
    cols.map((c) => {
      const sorted = c.key === state.sort;
      return el("th", {
        class: `sortable ${c.num ? "num" : ""} ${sorted ? "sorted" : ""} ${sorted && state.desc ? "desc" : ""}`,
        dataset: { sort: c.key },
        text: c.label,
        onclick: () => {
          if (state.sort === c.key) state.desc = !state.desc;
          else {
            state.sort = c.key;
            state.desc = Boolean(c.num) && !c.key.startsWith("score:") ? true : false;
          }
          remember();
          renderTable();
        },
      });
    }),
  );
  replace(document.getElementById("head"), row);
}

function renderTable() {
  const cols = columns();
  renderHead(cols);
  const rows = visibleRows();
  replace(document.getElementById("rows"), rows.map((r) => caseRow(r, cols)));
  document.getElementById("empty").hidden = rows.length > 0;
  document.getElementById("shown").textContent = `${rows.length} of ${state.rows.size} cases`;
  renderFilters();
}

function renderFilters() {
  const counts = { all: state.rows.size };
  for (const r of state.rows.values()) counts[caseGroup(r)] = (counts[caseGroup(r)] || 0) + 1;
  replace(
    document.getElementById("filters"),
    FILTERS.map(([key, label]) =>
      el("button", {
        type: "button",
        class: `chip ${state.filter === key ? "active" : ""}`,
        dataset: { filter: key },
        onclick: () => {
          state.filter = key;
          remember();
          renderTable();
        },
      }, label, el("span", { class: "count", text: counts[key] || 0 })),
    ),
  );
}

function remember() {
  const url = new URL(location.href);
  for (const [name, value] of [["filter", state.filter === "all" ? "" : state.filter], ["sort", state.sort], ["desc", state.desc ? "1" : ""]]) {
    if (value) url.searchParams.set(name, value);
    else url.searchParams.delete(name);
  }
  history.replaceState(null, "", url);
}

function stat(label, value, sub, kind) {
  return el("div", { class: "stat", dataset: { stat: label } },
    el("div", { class: "label", text: label }),
    el("div", { class: `value ${kind || ""}`, text: value }),
    sub ? el("div", { class: "sub", text: sub }) : null);
}

function renderStats() {
  const run = state.run;
  const counts = run.counts || {};
  const scored = counts.scored || 0;
  const scores = Object.entries(run.mean_scores || {}).sort(([a], [b]) => a.localeCompare(b));
  const rate = run.pass_rate;
  const cards = [
    stat("Pass rate", fmt.pct(rate), `${fmt.int(run.passed)} of ${fmt.int(scored)} scored cases`, rate === null ? "" : rate >= 0.8 ? "good" : rate < 0.5 ? "bad" : "warn"),
    stat("Cases", `${fmt.int(run.rows)} / ${casesCount(run)}`, `${fmt.int(run.failed)} failed · ${fmt.int(counts.needs_person)} need a person · ${fmt.int(counts.failed)} errored`),
    ...scores.map(([name, value]) => stat(`Mean ${name}`, fmt.score(value), "over the scored cases")),
    stat("Tokens", fmt.int(run.tokens), `${fmt.int(run.input_tokens)} in · ${fmt.int(run.output_tokens)} out · ${fmt.int(run.model_calls)} model calls`),
    stat("Latency p50", fmt.secs(run.latency_s && run.latency_s.p50), `p95 ${fmt.secs(run.latency_s && run.latency_s.p95)} · mean ${fmt.secs(run.latency_s && run.latency_s.mean)}`),
    stat("Cost", fmt.cost(run.cost_usd), run.cost_usd === null ? "not known (no cost_usd)" : "from the cases' cost_usd"),
    stat("Wall time", fmt.secs(wallSeconds(run)), run.started_at ? `started ${when(run.started_at)}` : ""),
  ];
  replace(document.getElementById("stats"), cards);
}

function renderHeadline() {
  const run = state.run;
  document.getElementById("title").textContent = run.run_id;
  document.title = `${run.run_id} · eval run · dex-agents-ray inspector`;
  replace(document.getElementById("status"), runBadge(run.status));
  replace(
    document.getElementById("meta"),
    el("span", { class: "agent", text: run.agent || "agent not recorded" }),
    run.key !== run.run_id ? el("span", { class: "muted", text: `folder ${run.key}` }) : null,
    run.stopped ? el("span", { class: "muted", text: `stopped: ${run.stopped}` }) : null,
    run.running !== null && run.running !== undefined && run.status !== "done"
      ? el("span", { class: "muted", text: `${run.running} running now` }) : null,
  );
  document.getElementById("pause").disabled = run.status !== "running";
  document.getElementById("resume").disabled = run.status !== "paused";
  document.getElementById("cancel").disabled = !["running", "paused"].includes(run.status);
}

function apply(data) {
  if (data.full) state.rows = new Map();
  for (const row of data.rows) state.rows.set(row.case_id, row);
  state.run = data.run;
  renderHeadline();
  renderStats();
  renderTable();
  document.body.dataset.loaded = "true";
  document.body.dataset.status = data.run.status;
  showError("");
}

async function control(action) {
  const node = document.getElementById("action-result");
  try {
    await api(`/api/evals/runs/${encodeURIComponent(runKey)}/${action}`, { body: {} });
    node.textContent = `${action[0].toUpperCase()}${action.slice(1)} sent; the driver picks it up before its next case.`;
    node.className = "muted small";
  } catch (e) {
    node.textContent = `${action} failed: ${e.message}`;
    node.className = "error small";
  }
}

async function loadOtherRuns() {
  try {
    const data = await api("/api/evals/runs");
    const select = document.getElementById("compare-with");
    for (const run of data.runs) {
      if (run.key === runKey) continue;
      select.append(el("option", { value: run.key, text: `${run.run_id}${run.key !== run.run_id ? ` (${run.key})` : ""}` }));
    }
    select.disabled = select.options.length < 2;
  } catch (e) {
    showError(`Could not list the other runs: ${e.message}`);
  }
}

for (const action of ["pause", "resume", "cancel"]) {
  document.getElementById(action).addEventListener("click", () => control(action));
}
document.getElementById("compare-with").addEventListener("change", (event) => {
  const other = event.target.value;
  if (other) location.href = `/evals/compare?a=${encodeURIComponent(other)}&b=${encodeURIComponent(runKey)}`;
});
document.getElementById("search").addEventListener("input", (event) => {
  state.search = event.target.value;
  renderTable();
});
setInterval(() => {
  if (state.run && (state.run.status === "running" || state.run.status === "paused")) renderStats();
}, 1000);

loadOtherRuns();
openLive(`/api/evals/runs/${encodeURIComponent(runKey)}/events`, apply);
