// Shared helpers of the inspector pages. Every value from a session is put into the
// page with textContent (never innerHTML), so message text stays text.
"use strict";

const CSRF = document.querySelector('meta[name="dex-csrf"]').content;

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "text") node.textContent = String(value);
    else if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

async function api(path, options) {
  const init = { credentials: "same-origin", headers: { Accept: "application/json" } };
  if (options && options.body !== undefined) {
    init.method = options.method || "POST";
    init.headers["Content-Type"] = "application/json";
    init.headers["X-Dex-Inspector-CSRF"] = CSRF;
    init.body = JSON.stringify(options.body);
  }
  const response = await fetch(path, init);
  const type = response.headers.get("content-type") || "";
  const data = type.includes("json") ? await response.json() : await response.text();
  if (!response.ok) {
    const detail = typeof data === "string" ? data : JSON.stringify(data.detail ?? data);
    throw new Error(`${response.status}: ${detail}`);
  }
  return data;
}

function ago(iso) {
  if (!iso) return "";
  const seconds = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  if (seconds < 60) return `${seconds} s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
  return new Date(iso).toLocaleString();
}

function when(iso) {
  return iso ? new Date(iso).toLocaleString() : "";
}

function badge(text, kind) {
  return el("span", { class: `badge ${kind || String(text).replace(/[^a-z_]/gi, "")}`, text });
}

function replace(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined));
}
