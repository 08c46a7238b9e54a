// Shared helpers of the eval pages: number formats, status badges, score meters and
// the live stream (an EventSource whose every message is the page's new data).
"use strict";

const fmt = {
  none: "—",
  pct(v) {
    return v === null || v === undefined ? fmt.none : `${(v * 100).toFixed(1)}%`;
  },
  score(v) {
    return v === null || v === undefined ? fmt.none : Number(v).toFixed(2);
  },
  int(v) {
    return v === null || v === undefined ? fmt.none : Number(v).toLocaleString("en-US");
  },
  secs(v) {
    if (v === null || v === undefined) return fmt.none;
    if (v < 10) return `${v.toFixed(2)} s`;
    if (v < 60) return `${v.toFixed(1)} s`;
    const m = Math.floor(v / 60);
    if (m < 60) return `${m} min ${Math.round(v - m * 60)} s`;
    return `${Math.floor(m / 60)} h ${m % 60} min`;
  },
  cost(v) {
    if (v === null || v === undefined) return fmt.none;
    return `$${Number(v).toFixed(v < 1 ? 4 : 2)}`;
  },
};

// A run's number of cases; a run of streamed cases whose end its driver has not
// reached yet shows the cases read so far, with a "+".
function casesCount(run) {
  return `${fmt.int(run.cases)}${run.cases_known === false ? "+" : ""}`;
}

function runBadge(status) {
  return badge(status, `run-${status}`);
}

// What a row counts as on the pages: passed, failed (scored, not passed), needs a
// person, errored (the case's status "failed": a turn, the session or a scorer
// failed), cancelled, or pending (no row yet).
function caseGroup(row) {
  switch (row.status) {
    case "scored":
      return row.passed === false ? "failed" : "passed";
    case "needs_person":
      return "needs_person";
    case "failed":
      return "errored";
    default:
      return row.status;
  }
}

const GROUP_LABELS = {
  passed: "passed",
  failed: "failed",
  needs_person: "needs person",
  errored: "errored",
  cancelled: "cancelled",
  pending: "pending",
};

function caseBadge(row) {
  const group = caseGroup(row);
  const kind = group === "failed" ? "failed" : group;
  const node = badge(GROUP_LABELS[group] || group, kind);
  if (row.error) node.title = row.error;
  return node;
}

function meter(value) {
  const span = el("span");
  span.style.width = `${Math.max(0, Math.min(1, value || 0)) * 100}%`;
  const level = value < 0.5 ? "low" : value < 0.8 ? "mid" : "";
  return el("span", { class: `meter ${level}` }, span);
}

function scoreCell(value) {
  if (value === null || value === undefined) return el("td", { class: "num muted", text: fmt.none });
  return el("td", { class: "num" }, el("div", { class: "bar-cell" }, fmt.score(value), meter(value)));
}

function scoreChips(scores) {
  const names = Object.keys(scores || {}).sort();
  if (!names.length) return el("span", { class: "muted", text: fmt.none });
  return el(
    "div",
    { class: "scores" },
    names.map((n) => el("span", { class: "score" }, el("span", { class: "name", text: n }), fmt.score(scores[n]))),
  );
}

// The latest run_eval call's wall time; counted here from started_at while it runs.
function wallSeconds(run) {
  if (run.wall_s !== null && run.wall_s !== undefined) return run.wall_s;
  if (run.started_at && (run.status === "running" || run.status === "paused")) {
    return Math.max(0, (Date.now() - Date.parse(run.started_at)) / 1000);
  }
  return null;
}

function runUrl(key) {
  return `/evals/runs/${encodeURIComponent(key)}`;
}

function caseUrl(key, caseId) {
  return `${runUrl(key)}/cases/${encodeURIComponent(caseId)}`;
}

function setLive(on) {
  const node = document.getElementById("live");
  if (!node) return;
  node.textContent = on ? "● live" : "○ reconnecting";
  node.className = on ? "live on" : "live";
}

const liveStats = { connects: 0, messages: 0, errors: 0 };
window.evalLiveStats = liveStats;

// Every message of the stream is the page's new data; EventSource reconnects by itself
// and the server starts each connection with the whole state.
function openLive(url, onData) {
  const source = new EventSource(url);
  source.onopen = () => {
    liveStats.connects += 1;
    setLive(true);
  };
  source.onmessage = (message) => {
    liveStats.messages += 1;
    onData(JSON.parse(message.data));
  };
  source.onerror = () => {
    liveStats.errors += 1;
    setLive(false);
  };
  return source;
}

function showError(text) {
  const node = document.getElementById("error");
  if (!node) return;
  node.textContent = text || "";
  node.hidden = !text;
}
