// Two runs side by side, per case: regressions first, then improvements, then the
// cases that did not change; cases only one run has are listed apart (they change the
// case set, not the agent).
"use strict";

const params = new URLSearchParams(location.search);
const keyA = params.get("a") || "";
const keyB = params.get("b") || "";
let compared = null;

// "A → B"; B marked better or worse when it moved by at least `least` (absolute) and
// `share` of A (tokens and latency move a little from run to run).
function pair(before, after, format, higherIsBetter, least = 1e-9, share = 0) {
  const a = before === null || before === undefined ? null : before;
  const b = after === null || after === undefined ? null : after;
  let kind = "";
  const moved = a !== null && b !== null && Math.abs(b - a) >= least && Math.abs(b - a) >= share * Math.abs(a);
  if (moved) kind = (b > a) === higherIsBetter ? "better" : "worse";
  return el("div", { class: "pair" },
    el("span", { text: format(a) }),
    el("span", { class: "arrow", text: "→" }),
    el("span", { class: kind, text: format(b) }));
}

function changeBadge(change) {
  const label = { regressed: "regressed", status: "regressed", improved: "improved" }[change] || "unchanged";
  return badge(label, change || "unchanged");
}

function sharedRow(item, scorers) {
  const group = item.change === "regressed" || item.change === "status" ? "regressed" : item.change || "unchanged";
  return el("tr", { class: group, dataset: { case: item.case_id, change: group } },
    el("td", {}, el("strong", { text: item.case_id })),
    el("td", {}, changeBadge(item.change)),
    el("td", {}, el("a", { href: caseUrl(keyA, item.case_id) }, caseBadge(item.before))),
    el("td", {}, el("a", { href: caseUrl(keyB, item.case_id) }, caseBadge(item.after))),
    scorers.map((n) => el("td", { class: "num" }, pair(item.before.scores[n], item.after.scores[n], fmt.score, true))),
    el("td", { class: "num" }, pair(item.before.tokens, item.after.tokens, fmt.int, false, 1, 0.25)),
    el("td", { class: "num" }, pair(item.before.latency_s, item.after.latency_s, fmt.secs, false, 0.05, 0.25)),
    el("td", { class: "small muted", text: item.detail }));
}

function singleRow(row, key) {
  return el("tr", { dataset: { case: row.case_id } },
    el("td", {}, el("a", { href: caseUrl(key, row.case_id), text: row.case_id })),
    el("td", {}, caseBadge(row)),
    el("td", {}, scoreChips(row.scores)));
}

function stat(label, value, sub, kind) {
  return el("div", { class: `stat ${label.startsWith("Pass rate") ? "wide" : ""}`, dataset: { stat: label } },
    el("div", { class: "label", text: label }),
    el("div", { class: `value ${kind || ""}`, text: value }),
    sub ? el("div", { class: "sub", text: sub }) : null);
}

function render() {
  const data = compared;
  const counts = data.counts;
  const before = data.pass_rate_before;
  const after = data.pass_rate_after;
  const delta = before === null || after === null ? null : after - before;
  document.title = `${data.a.run_id} → ${data.b.run_id} · dex-agents-ray inspector`;
  replace(
    document.getElementById("meta"),
    el("span", {}, "A ", el("a", { href: runUrl(data.a.key), text: data.a.run_id }), " ", runBadge(data.a.status)),
    el("span", { class: "muted", text: "→" }),
    el("span", {}, "B ", el("a", { href: runUrl(data.b.key), text: data.b.run_id }), " ", runBadge(data.b.status)),
    el("span", { class: "muted", text: `agents ${data.a.agent || "—"} / ${data.b.agent || "—"}` }),
  );
  replace(
    document.getElementById("stats"),
    stat("Pass rate A → B", `${fmt.pct(before)} → ${fmt.pct(after)}`,
      `over the ${counts.shared} shared cases${delta === null ? "" : ` (${delta >= 0 ? "+" : ""}${(delta * 100).toFixed(1)} points)`}`,
      delta === null || delta === 0 ? "" : delta > 0 ? "good" : "bad"),
    stat("Regressed", fmt.int(counts.regressed), "passed, scored higher, or scored in A", counts.regressed ? "bad" : ""),
    stat("Improved", fmt.int(counts.improved), "better in B", counts.improved ? "good" : ""),
    stat("Unchanged", fmt.int(counts.unchanged), "shared cases"),
    stat("Added in B", fmt.int(counts.added), "not counted as regressions"),
    stat("Removed from A", fmt.int(counts.removed), "not counted as regressions"),
  );
  const onlyChanged = document.getElementById("changed-only").checked;
  const shared = data.shared.filter((item) => !onlyChanged || item.change);
  replace(document.getElementById("shared-head"), el("tr", {},
    el("th", { text: "Case" }), el("th", { text: "Change" }),
    el("th", { text: `A: ${data.a.run_id}` }), el("th", { text: `B: ${data.b.run_id}` }),
    data.scorers.map((n) => el("th", { class: "num", text: n })),
    el("th", { class: "num", text: "Tokens" }), el("th", { class: "num", text: "Latency" }),
    el("th", { text: "What changed" })));
  replace(document.getElementById("shared"), shared.map((item) => sharedRow(item, data.scorers)));
  document.getElementById("shared-count").textContent = `${shared.length} of ${counts.shared}`;
  document.getElementById("no-shared").hidden = data.shared.length > 0;
  replace(document.getElementById("added"), data.added.map((row) => singleRow(row, keyB)));
  replace(document.getElementById("removed"), data.removed.map((row) => singleRow(row, keyA)));
  document.getElementById("added-count").textContent = String(data.added.length);
  document.getElementById("removed-count").textContent = String(data.removed.length);
  document.getElementById("no-added").hidden = data.added.length > 0;
  document.getElementById("no-removed").hidden = data.removed.length > 0;
  document.body.dataset.loaded = "true";
}

function go(a, b) {
  location.href = `/evals/compare?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}`;
}

async function load() {
  try {
    const [data, list] = await Promise.all([
      api(`/api/evals/compare?a=${encodeURIComponent(keyA)}&b=${encodeURIComponent(keyB)}`),
      api("/api/evals/runs"),
    ]);
    for (const [id, chosen] of [["pick-a", keyA], ["pick-b", keyB]]) {
      const select = document.getElementById(id);
      replace(select, list.runs.map((run) => el("option", { value: run.key, text: run.run_id, selected: run.key === chosen })));
    }
    compared = data;
    render();
  } catch (e) {
    showError(`Could not compare the runs: ${e.message}`);
  }
}

document.getElementById("pick-a").addEventListener("change", (e) => go(e.target.value, keyB));
document.getElementById("pick-b").addEventListener("change", (e) => go(keyA, e.target.value));
document.getElementById("swap").addEventListener("click", () => go(keyB, keyA));
document.getElementById("changed-only").addEventListener("change", () => compared && render());
load();
