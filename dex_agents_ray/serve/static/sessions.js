// The sessions page: every session of the served agents, newest activity first.
"use strict";

const waitingBox = document.getElementById("waiting");
waitingBox.checked = new URLSearchParams(location.search).get("waiting") === "1";

function sessionRow(s) {
  const waits = s.waiting_for.map((w) => badge(w === "approval" ? "approval" : "question", "wait"));
  return el(
    "tr",
    { dataset: { session: s.session_id }, class: s.waiting_for.length ? "needs-person" : "" },
    el("td", {}, el("a", { href: `/sessions/${encodeURIComponent(s.session_id)}`, text: s.session_id })),
    el("td", { text: s.agent }),
    el("td", {}, badge(s.flow_status === "running" ? s.status : s.flow_status)),
    el("td", {}, waits.length ? waits : el("span", { class: "muted", text: "—" })),
    el("td", { class: "num", text: s.turn_count }),
    el("td", { title: when(s.last_activity), text: ago(s.last_activity) }),
    el("td", { class: "muted", text: when(s.started_at) }),
  );
}

let loading = false;
async function load() {
  if (loading) return;
  loading = true;
  const error = document.getElementById("error");
  try {
    const data = await api(`/api/sessions?waiting=${waitingBox.checked ? "true" : "false"}`);
    replace(document.getElementById("rows"), data.sessions.map(sessionRow));
    document.getElementById("empty").hidden = data.sessions.length > 0;
    document.getElementById("empty").textContent = waitingBox.checked
      ? "No session is waiting for a person."
      : "No sessions yet.";
    document.getElementById("agents").textContent = `agents: ${data.agents.join(", ")}`;
    document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
    document.body.dataset.loaded = "true";
    error.hidden = true;
  } catch (e) {
    error.textContent = `Could not load the sessions: ${e.message}`;
    error.hidden = false;
  } finally {
    loading = false;
  }
}

waitingBox.addEventListener("change", () => {
  const url = new URL(location.href);
  if (waitingBox.checked) url.searchParams.set("waiting", "1");
  else url.searchParams.delete("waiting");
  history.replaceState(null, "", url);
  load();
});
document.getElementById("refresh").addEventListener("click", load);
load();
setInterval(load, 3000);
