// The session page: the snapshot, then the live event stream from its resume token.
// Text deltas are grouped by (turn, Step execution) and only the highest attempt of a
// Step execution is kept; after a turn ends its live text gives way to the stored
// messages. A reconnecting EventSource sends Last-Event-ID and the server resumes
// after it; an event whose offset was already applied is dropped (and counted).
// An eval case's page shows its session with this script too: it calls
// openSession(id), and the parts a page leaves out (the composer, the plan) are skipped.
"use strict";

const onSessionPage = document.body.dataset.page === "session";
let sessionId = "";
let base = "";
const stats = { connects: 0, events: 0, duplicates: 0, snapshots: 0, errors: 0, types: [] };
window.inspectorStats = stats;

let snapshot = null;
let flowStatus = "";
let lastOffset = -1;
let source = null;
let graphKey = "";
let graphVersion = 0;
const live = new Map(); // `${turn}|${stepExecution}` -> { turn, attempt, text, reasoning }
const endedTurns = new Set();

function offsetOf(token) {
  const n = Number.parseInt(String(token).split(".")[0], 10);
  return Number.isFinite(n) ? n : -1;
}

// -- snapshot ----------------------------------------------------------------------------

let refreshing = null;
let refreshAgain = false;

async function loadSnapshot() {
  const data = await api(base);
  stats.snapshots += 1;
  snapshot = data.snapshot;
  flowStatus = data.flow_status;
  if (onSessionPage) {
    document.getElementById("title").textContent = sessionId;
    document.title = `${sessionId} · dex-agents-ray inspector`;
  }
  for (const [key, entry] of live) {
    if (endedTurns.has(entry.turn) || turnFinished(entry.turn)) live.delete(key);
  }
  endedTurns.clear();
  render(data.agent);
  return data.resume_token;
}

// A turn the snapshot already shows as ended: its stored messages replace live text
// (a late delta, after a reconnect, must not show the text twice).
function turnFinished(turn) {
  const state = snapshot && snapshot.state;
  if (!state || !turn || state.active_turn_id === turn) return false;
  return snapshot.messages.some((m) => m.turn_id === turn);
}

function scheduleRefresh() {
  if (refreshing) {
    refreshAgain = true;
    return;
  }
  refreshing = (async () => {
    try {
      do {
        refreshAgain = false;
        await loadSnapshot();
      } while (refreshAgain);
    } catch (e) {
      showResult(`Could not reload the session: ${e.message}`, true);
    } finally {
      refreshing = null;
    }
  })();
}

// -- events ------------------------------------------------------------------------------

function openStream(token) {
  if (source) source.close();
  const url = `${base}/events?resume_token=${encodeURIComponent(token || "")}`;
  source = new EventSource(url);
  source.onopen = () => {
    stats.connects += 1;
    setLive(true);
  };
  source.onmessage = (message) => applyFrame(message);
  source.onerror = () => {
    stats.errors += 1;
    setLive(false);
    if (source.readyState === EventSource.CLOSED) {
      // A refused token (400) or a lost session: start again from a fresh snapshot.
      setTimeout(start, 1000);
    }
  };
}

function applyFrame(message) {
  const offset = offsetOf(message.lastEventId);
  if (offset <= lastOffset) {
    stats.duplicates += 1;
    return;
  }
  lastOffset = offset;
  stats.events += 1;
  const event = JSON.parse(message.data);
  const payload = event.payload ? JSON.parse(event.payload) : {};
  stats.types.push(event.type);
  switch (event.type) {
    case "text_delta":
    case "reasoning_delta": {
      if (turnFinished(event.turn_id)) return;
      const key = `${event.turn_id}|${event.step_execution_id}`;
      let entry = live.get(key);
      if (entry && event.attempt < entry.attempt) return; // a superseded attempt
      if (!entry || event.attempt > entry.attempt) {
        entry = { turn: event.turn_id, attempt: event.attempt, text: "", reasoning: "" };
        live.set(key, entry);
      }
      if (event.type === "text_delta") entry.text += payload.text || "";
      else entry.reasoning += payload.text || "";
      renderTranscript();
      return;
    }
    case "turn_completed":
    case "turn_failed":
    case "turn_steered":
    case "turn_cancelled":
      endedTurns.add(event.turn_id);
      scheduleRefresh();
      return;
    default:
      scheduleRefresh();
  }
}

function setLive(on) {
  const node = document.getElementById("live");
  node.textContent = on ? "● live" : "○ reconnecting";
  node.className = on ? "live on" : "live";
}

// -- rendering ---------------------------------------------------------------------------

function render(agent) {
  const state = snapshot.state;
  const meta = document.getElementById("meta");
  const usage = snapshot.usage || {};
  replace(
    meta,
    el("span", { class: "agent", text: agent }),
    badge(flowStatus === "running" ? (state ? state.status : "starting") : flowStatus),
    state ? el("span", { text: `${state.interaction_mode} · turn ${state.turn_count}` }) : null,
    el("span", {
      class: "muted",
      text: `${usage.input_tokens || 0} in / ${usage.output_tokens || 0} out tokens · ${usage.model_calls || 0} model calls`,
    }),
    snapshot.queued_message_count
      ? el("span", { text: `${snapshot.queued_message_count} queued` })
      : null,
  );
  const error = document.getElementById("turn-error");
  error.hidden = !(state && state.last_turn_error);
  error.textContent = state && state.last_turn_error ? `Last turn failed: ${state.last_turn_error}` : "";
  renderTranscript();
  renderPending();
  renderCalls();
  renderPlan();
  renderControls();
  renderGraph();
}

function messageItem(m) {
  const who = { user: "User", assistant: "Agent", tool: m.tool_name || "Tool" }[m.role] || m.role;
  const body = [];
  if (m.text) body.push(el("div", { class: "text", text: m.text }));
  if (m.role === "assistant" && m.tool_name) {
    body.push(el("div", { class: "call", text: `calls ${m.tool_name}(${m.tool_arguments || ""})` }));
  }
  if (m.role === "tool" && m.tool_output !== null && m.tool_output !== undefined) {
    body.push(el("div", { class: "output", text: m.tool_output }));
  }
  return el(
    "li",
    { class: `message ${m.role}`, dataset: { sequence: m.sequence } },
    el("div", { class: "who", text: who, title: when(m.created_at) }),
    body,
  );
}

function renderTranscript() {
  if (!snapshot) return;
  const list = document.getElementById("transcript");
  const atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
  const items = snapshot.messages.map(messageItem);
  for (const entry of live.values()) {
    if (!entry.text && !entry.reasoning) continue;
    items.push(
      el(
        "li",
        { class: "message assistant streaming" },
        el("div", { class: "who", text: "Agent (streaming)" }),
        entry.reasoning ? el("div", { class: "reasoning", text: entry.reasoning }) : null,
        el("div", { class: "text", text: entry.text }),
      ),
    );
  }
  if (!items.length) items.push(el("li", { class: "muted", text: "No messages yet." }));
  replace(list, items);
  if (atBottom) list.scrollTop = list.scrollHeight;
}

function approvalCard(i) {
  const note = el("textarea", { rows: 2, placeholder: "Message to the agent (with a rejection)", maxlength: 10000 });
  const resolve = (approved) =>
    act(`${base}/interrupts/${encodeURIComponent(i.interrupt_id)}/resolve`, {
      approved,
      message: note.value || null,
    }, approved ? "Approved" : "Rejected");
  return el(
    "div",
    { class: "card approval", dataset: { interrupt: i.interrupt_id } },
    el("div", { class: "card-title" }, badge("approval", "wait"), el("strong", { text: i.tool_name }), i.effect ? badge(i.effect, "effect") : null),
    el("pre", { class: "args", text: prettyJson(i.arguments) }),
    i.deadline ? el("div", { class: "muted small", text: `deadline ${when(i.deadline)}` }) : null,
    note,
    el(
      "div",
      { class: "buttons" },
      el("button", { type: "button", class: "approve", text: "Approve", onclick: () => resolve(true) }),
      el("button", { type: "button", class: "danger reject", text: "Reject", onclick: () => resolve(false) }),
    ),
  );
}

function questionCard(i) {
  const url = `${base}/interrupts/${encodeURIComponent(i.interrupt_id)}`;
  const answer = (value) => act(`${url}/answer`, { answer: value }, "Answered");
  const parts = [
    el("div", { class: "card-title" }, badge("question", "wait"), el("strong", { text: i.tool_name })),
    el("p", { class: "question", text: i.question || "" }),
  ];
  if (i.choices && i.choices.length) {
    parts.push(
      el("div", { class: "choices" }, i.choices.map((c) =>
        el("button", { type: "button", class: "choice", text: c, onclick: () => answer(c) }),
      )),
    );
  }
  if (i.allows_free_text) {
    const box = el("input", { type: "text", class: "free-text", placeholder: "Your answer", maxlength: 10000 });
    parts.push(
      el("div", { class: "answer-row" }, box,
        el("button", { type: "button", class: "answer", text: "Answer", onclick: () => answer(box.value) })),
    );
  }
  parts.push(
    el("div", { class: "buttons" },
      el("button", {
        type: "button",
        class: "danger decline",
        text: "Decline",
        onclick: () => act(`${url}/resolve`, { approved: false, message: null }, "Declined"),
      })),
  );
  if (i.deadline) parts.push(el("div", { class: "muted small", text: `deadline ${when(i.deadline)}` }));
  return el("div", { class: "card question-card", dataset: { interrupt: i.interrupt_id } }, parts);
}

// A card stays while its interrupt is pending: a refresh (any event brings one) must
// not throw away an answer or a note being typed, nor the focus of its box.
function renderPending() {
  const pending = snapshot.pending_interrupts || [];
  const box = document.getElementById("pending");
  const keyOf = (i) => `${i.turn_id}|${i.interrupt_id}`;
  const shown = new Map([...box.children].map((card) => [card.dataset.key, card]));
  const keys = pending.map(keyOf);
  if (keys.length !== shown.size || keys.some((key, n) => box.children[n].dataset.key !== key)) {
    replace(
      box,
      pending.map((i) => {
        const card = shown.get(keyOf(i)) || (i.kind === "question" ? questionCard(i) : approvalCard(i));
        card.dataset.key = keyOf(i);
        return card;
      }),
    );
  }
  document.getElementById("no-pending").hidden = pending.length > 0;
}

function renderCalls() {
  const calls = snapshot.tool_calls || [];
  replace(
    document.getElementById("calls"),
    calls.map((c) =>
      el(
        "tr",
        { dataset: { call: c.tool_call_id } },
        el("td", {}, el("strong", { text: c.tool_name }), el("div", { class: "muted small", text: c.tool_call_id })),
        el("td", {}, badge(c.effect, "effect")),
        el("td", {}, badge(c.status)),
        el("td", { class: "small", text: c.error || c.rejection_message || c.output || "" }),
      ),
    ),
  );
  document.getElementById("no-calls").hidden = calls.length > 0;
}

function renderPlan() {
  const plan = snapshot.plan;
  const section = document.getElementById("plan-section");
  if (!section) return;
  section.hidden = !plan;
  if (!plan) return;
  document.getElementById("plan-meta").textContent = `revision ${plan.revision} · ${plan.status}`;
  replace(
    document.getElementById("plan"),
    plan.todos.map((t) => el("li", { class: `todo ${t.status}` }, badge(t.status), " ", t.content)),
  );
  const state = snapshot.state;
  const idle = state && !state.active_turn_id && state.status === "waiting_for_user_message";
  const button = document.getElementById("execute-plan");
  button.disabled = !(idle && ["draft", "active"].includes(plan.status));
  button.onclick = () => act(`${base}/plan/execute`, { revision: plan.revision }, "Plan execution");
}

function renderControls() {
  if (!document.getElementById("send")) return;
  const state = snapshot.state;
  const running = flowStatus === "running";
  const active = Boolean(state && state.active_turn_id);
  document.getElementById("send").disabled = !running;
  document.getElementById("steer").disabled = !(running && active);
  document.getElementById("stop").disabled = !(running && active);
}

function renderGraph() {
  const state = snapshot.state || {};
  const key = JSON.stringify([
    flowStatus,
    state.status,
    state.active_turn_id,
    (snapshot.pending_interrupts || []).map((i) => i.interrupt_id),
    (snapshot.tool_calls || []).map((c) => c.status),
  ]);
  if (key === graphKey) return;
  graphKey = key;
  graphVersion += 1;
  const url = `${base}/graph.svg?v=${graphVersion}`;
  document.getElementById("graph").src = url;
  document.getElementById("graph-link").href = url;
  document.getElementById("steps").textContent = "Highlighted: the Steps the session is in.";
}

function prettyJson(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return String(text || "");
  }
}

// -- actions -----------------------------------------------------------------------------

function showResult(text, isError) {
  const node = document.getElementById("action-result");
  node.textContent = text;
  node.className = isError ? "error small" : "muted small";
}

async function act(url, body, what) {
  try {
    const result = await api(url, { body });
    showResult(result.ok ? `${what}.` : `${what}: the session refused (it may have moved on).`, !result.ok);
  } catch (e) {
    showResult(`${what} failed: ${e.message}`, true);
  }
  scheduleRefresh();
}

function addComposerListeners() {
  document.getElementById("send").addEventListener("click", () => {
    const box = document.getElementById("message");
    const text = box.value;
    act(`${base}/messages`, { text }, "Sent").then(() => { box.value = ""; });
  });
  document.getElementById("steer").addEventListener("click", () => {
    const box = document.getElementById("message");
    act(`${base}/steer`, { text: box.value }, "Steered").then(() => { box.value = ""; });
  });
  document.getElementById("stop").addEventListener("click", () => {
    const turn = snapshot && snapshot.state && snapshot.state.active_turn_id;
    if (turn) act(`${base}/cancel`, { turn_id: turn }, "Stop requested");
  });
}

async function start() {
  try {
    const token = await loadSnapshot();
    // A fresh stream replays the active turn from the snapshot's token.
    live.clear();
    lastOffset = -1;
    openStream(token);
    document.body.dataset.loaded = "true";
  } catch (e) {
    showResult(`Could not load the session: ${e.message}`, true);
    setTimeout(start, 2000);
  }
}

function openSession(id) {
  sessionId = id;
  base = `/api/sessions/${encodeURIComponent(id)}`;
  if (document.getElementById("send")) addComposerListeners();
  start();
}

if (onSessionPage) openSession(decodeURIComponent(location.pathname.split("/")[2] || ""));
