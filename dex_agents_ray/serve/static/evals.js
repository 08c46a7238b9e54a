// The runs page: every run directory of the served folder, newest first, live.
"use strict";

let runs = [];
const picked = [];

function runRow(run) {
  const box = el("input", { type: "checkbox", "aria-label": `compare ${run.run_id}` });
  box.checked = picked.includes(run.key);
  box.addEventListener("change", () => togglePick(run.key, box.checked));
  const done = run.rows;
  const cases = el("td", { class: "num" }, `${fmt.int(done)} / ${casesCount(run)}`);
  if (run.status === "running" || run.status === "paused") {
    const fill = el("span");
    fill.style.width = `${run.cases ? Math.min(100, (100 * done) / run.cases) : 0}%`;
    cases.append(el("span", { class: "progress" }, fill));
  }
  const wall = el("td", { class: "num wall", text: fmt.secs(wallSeconds(run)) });
  wall.dataset.started = run.started_at || "";
  wall.dataset.live = run.wall_s === null && (run.status === "running" || run.status === "paused") ? "1" : "";
  return el(
    "tr",
    { dataset: { run: run.key, status: run.status } },
    el("td", { class: "check" }, box),
    el("td", {}, el("a", { href: runUrl(run.key), text: run.run_id }),
      run.key !== run.run_id ? el("div", { class: "muted small", text: run.key }) : null),
    el("td", { text: run.agent || fmt.none }),
    el("td", {}, runBadge(run.status), run.stopped ? el("div", { class: "muted small", text: run.stopped }) : null),
    cases,
    el("td", { class: "num pass-rate", text: fmt.pct(run.pass_rate) }),
    el("td", {}, scoreChips(run.mean_scores)),
    el("td", { class: "num", text: fmt.int(run.tokens) }),
    el("td", { class: "num", text: fmt.cost(run.cost_usd) }),
    wall,
    el("td", { class: "muted", title: when(run.started_at), text: run.started_at ? ago(run.started_at) : fmt.none }),
  );
}

function togglePick(key, on) {
  const at = picked.indexOf(key);
  if (on && at < 0) picked.push(key);
  if (!on && at >= 0) picked.splice(at, 1);
  while (picked.length > 2) picked.shift();
  render();
}

function render() {
  replace(document.getElementById("rows"), runs.map(runRow));
  const empty = document.getElementById("empty");
  empty.hidden = runs.length > 0;
  document.getElementById("compare").disabled = picked.length !== 2;
}

function show(data) {
  runs = data.runs;
  for (let i = picked.length - 1; i >= 0; i -= 1) {
    if (!runs.some((r) => r.key === picked[i])) picked.splice(i, 1);
  }
  const folder = document.getElementById("directory");
  folder.textContent = `in ${data.directory.split("/").filter(Boolean).pop() || data.directory}/`;
  folder.title = data.directory;
  document.getElementById("empty").textContent =
    `No eval runs in ${data.directory} yet: dex-agents-ray eval CASES.jsonl --agent MODULE:ATTR --run-id RUN writes one to evals/RUN.`;
  render();
  document.body.dataset.loaded = "true";
  showError("");
}

document.getElementById("compare").addEventListener("click", () => {
  // A is the run that started first, B the later one.
  const [a, b] = picked
    .map((key) => runs.find((r) => r.key === key))
    .sort((x, y) => Date.parse(x.started_at || 0) - Date.parse(y.started_at || 0));
  location.href = `/evals/compare?a=${encodeURIComponent(a.key)}&b=${encodeURIComponent(b.key)}`;
});

setInterval(() => {
  for (const cell of document.querySelectorAll("td.wall[data-live='1']")) {
    cell.textContent = fmt.secs((Date.now() - Date.parse(cell.dataset.started)) / 1000);
  }
}, 1000);

openLive("/api/evals/events", show);
