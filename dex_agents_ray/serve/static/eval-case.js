// An eval case's page: its input, expected answer, answer and scores beside its
// session (session.js: the live transcript, tool calls, and the approvals and
// questions a person can answer here).
"use strict";

const caseParts = location.pathname.split("/");
const caseRunKey = decodeURIComponent(caseParts[3] || "");
const caseId = decodeURIComponent(caseParts.slice(5).join("/"));

function showValue(id, value) {
  const node = document.getElementById(id);
  if (value === null || value === undefined || value === "") {
    node.textContent = "—";
    node.classList.add("muted");
    return;
  }
  node.textContent = typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

function renderCase(data) {
  const row = data.row;
  const item = data.case;
  const run = data.run;
  document.title = `${caseId} · ${run.run_id} · dex-agents-ray inspector`;
  document.getElementById("case-title").textContent = caseId;
  const runLink = document.getElementById("run-link");
  runLink.textContent = `← ${run.run_id}`;
  runLink.href = runUrl(caseRunKey);
  replace(document.getElementById("case-status"), caseBadge(row || { status: "pending" }));
  const sessionLink = document.getElementById("session-link");
  sessionLink.href = `/sessions/${encodeURIComponent(data.session_id)}`;
  sessionLink.hidden = !data.session_served;
  document.getElementById("session-id").textContent = data.session_id;
  replace(
    document.getElementById("case-meta"),
    el("span", {}, "run ", el("a", { href: runUrl(caseRunKey), text: run.run_id })),
    el("span", { class: "agent", text: run.agent || "" }),
    runBadge(run.status),
  );
  const metadata = item && Object.keys(item.metadata || {}).length ? item.metadata : null;
  document.getElementById("metadata-field").hidden = !metadata;
  if (metadata) showValue("metadata", metadata);

  const turns = item ? (item.turns || [item.input]) : [];
  replace(document.getElementById("input"), turns.length
    ? turns.map((t) => el("li", { text: t }))
    : el("li", { class: "muted", text: "not recorded (no cases.jsonl in the run's folder)" }));
  showValue("expected", item ? item.expected : null);
  showValue("answer", row ? row.answer : null);
  const error = document.getElementById("case-error");
  error.hidden = !(row && row.error);
  error.textContent = row && row.error ? row.error : "";
  error.className = row && row.status === "needs_person" ? "small waits" : "error small";

  const scores = row ? Object.keys(row.scores).sort() : [];
  replace(document.getElementById("scores"), scores.map((name) =>
    el("tr", { dataset: { score: name } },
      el("td", {}, el("strong", { text: name })),
      scoreCell(row.scores[name]),
      el("td", { class: "small muted", text: (row.reasons || {})[name] || "" }))));
  document.getElementById("no-scores").hidden = scores.length > 0;
  const figures = row ? [
    ["passed", row.passed === null ? "—" : row.passed ? "yes" : "no"],
    ["turns", fmt.int(row.turns)],
    ["tokens", `${fmt.int(row.input_tokens)} in / ${fmt.int(row.output_tokens)} out`],
    ["model calls", fmt.int(row.model_calls)],
    ["tool calls", fmt.int(row.tool_calls)],
    ["interrupts answered", fmt.int(row.interrupts_answered)],
    ["latency", fmt.secs(row.latency_s)],
    ["cost", fmt.cost(row.cost_usd)],
  ] : [];
  replace(document.getElementById("figures"), figures.map(([k, v]) => el("span", {}, `${k} `, el("b", { text: v }))));

  const note = document.getElementById("needs-note");
  note.hidden = !(row && row.status === "needs_person");
  note.textContent = "This case waits for a person. Answer below; then run the same run ID again " +
    `(dex-agents-ray eval … --run-id ${run.run_id}) and it is scored from where the session is.`;
}

async function loadCase() {
  try {
    const data = await api(`/api/evals/runs/${encodeURIComponent(caseRunKey)}/cases/${encodeURIComponent(caseId)}`);
    renderCase(data);
    document.body.dataset.caseLoaded = "true";
    if (data.session_served) {
      openSession(data.session_id);
    } else {
      const node = document.getElementById("not-served");
      node.hidden = false;
      node.textContent = `The session ${data.session_id} is not shown: it does not exist yet, or ` +
        `its agent (${data.run.agent || "not recorded"}) is not one this inspector serves (--agent).`;
      setLive(false);
    }
  } catch (e) {
    showError(`Could not load the case: ${e.message}`);
  }
}

loadCase();
