// The bases page: list with status, model and file counts; create; delete with confirmation.
import { api, badge, el, enc, fillModels, notify, showError, start } from "./common.js";

function countsText(counts) {
  const total = Object.values(counts).reduce((a, b) => a + b, 0);
  if (!total) return "empty";
  const parts = Object.entries(counts).map(([status, n]) => `${n} ${status}`);
  return `${total}: ${parts.join(", ")}`;
}

// What a base's state means to its user: "completed" alone said nothing of items still being
// processed, an empty base or failures (the same words as `kb base list`).
function baseState(base, counts) {
  if (base.status !== "completed") return base.status;
  const total = Object.values(counts).reduce((a, b) => a + b, 0);
  if (!total) return "empty";
  const active = total - (counts.completed || 0) - (counts.failed || 0);
  if (active) return `processing, ${active} to go`;
  return counts.failed ? `ready, ${counts.failed} failed` : "ready";
}

function stateBadge(state) {
  // "ready, 2 failed" is amber: failed is never green (issue 42)
  const kind = / failed$/.test(state) ? "partly" : state.split(/[ ,]/)[0];
  const node = badge(kind);
  node.textContent = state;
  return node;
}

function formatBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

async function deleteBase(base) {
  const ok = window.confirm(
    `Delete base "${base.name}" with all its files and index? This cannot be undone.`,
  );
  if (!ok) return;
  try {
    await api(`/bases/${enc(base.id)}`, { method: "DELETE" });
    notify(`Deleted base ${base.name}.`, false);
    await load();
  } catch (err) {
    showError(err);
  }
}

async function load() {
  const bases = await api("/bases");
  const body = document.querySelector("#bases-table tbody");
  const rows = await Promise.all(
    bases.map(async (b) => {
      const { counts, index_bytes: size } = await api(`/bases/${enc(b.id)}/summary`);
      const del = el("button", { type: "button", class: "danger", onclick: () => deleteBase(b) },
        "Delete", el("span", { class: "sr-only" }, ` base ${b.name}`));
      return el("tr", { "data-base": b.name },
        el("th", { scope: "row" }, el("a", { href: `/console/bases/${enc(b.name)}` }, b.name)),
        el("td", {}, stateBadge(baseState(b, counts)), b.error ? ` ${b.error}` : ""),
        el("td", {}, b.embedding_model_id || "BM25 only"),
        el("td", { class: "counts" }, countsText(counts)),
        el("td", { class: "size" }, size === null ? "–" : formatBytes(size)),
        el("td", {}, del));
    }),
  );
  body.replaceChildren(...rows);
  document.getElementById("bases-empty").hidden = bases.length > 0;
  await fillModels(document.getElementById("models"), bases.map((b) => b.embedding_model_id));
}

async function create(event) {
  event.preventDefault();
  const name = document.getElementById("create-name").value.trim();
  const model = document.getElementById("create-model").value.trim();
  const json = { name };
  if (model) json.embedding_model_id = model;
  try {
    await api("/bases", { method: "POST", json });
    event.target.reset();
    notify(`Created base ${name}.`, false);
    await load();
  } catch (err) {
    showError(err);
  }
}

start(async () => {
  document.getElementById("create-form").addEventListener("submit", create);
  await load();
});
