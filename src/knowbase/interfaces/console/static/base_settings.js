// The base page's settings card: patch settings, enable or switch the embedding model (and
// follow the switch), restore into a new base.
//
// A BM25-only base gets a model through POST /bases/{b}/enable-embedding; a base with a model
// switches through POST /bases/{b}/embedding-model (202, a model-switch job). Either way the
// stored chunks are embedded in the background (no source re-read) and GET
// /bases/{b}/model-switch says how far it is; the old model (or BM25 alone) serves until the swap.
import {
  api, enc, fillModels, notify, request, showError, ApiError,
} from "./common.js";

const TERMINAL = new Set(["completed", "failed", "cancelled"]);
const POLL_MS = 1000;

// The form's fields come from the settings' declaration (catalog/base_settings.py): each says
// its kind (number, text, select, checkbox) and whether it may be empty (null).
function settingFields() {
  return [...document.getElementById("settings-form").querySelectorAll("[data-kind]")];
}

// A field's value as the PATCH carries it; undefined: leave the setting as it is.
function settingValue(el) {
  const nullable = el.hasAttribute("data-nullable");
  if (el.dataset.kind === "checkbox") return el.checked;
  const raw = el.dataset.kind === "text" && nullable ? el.value.trim() : el.value;
  if (raw === "") return nullable ? null : undefined;
  return el.dataset.kind === "number" ? Number(raw) : raw;
}

// Only what applies: fusion settings need a model (a BM25-only base has one lane), the vector
// weight is convex fusion's and k is RRF's.
function showApplicable(hasModel) {
  const fusion = document.querySelector('#settings-form [name="fusion"]');
  for (const label of document.querySelectorAll("#settings-form [data-needs-model]")) {
    const input = label.querySelector("[data-kind]");
    let shown = hasModel;
    if (input.name === "fusion_alpha") shown = shown && fusion.value === "convex";
    if (input.name === "rrf_k") shown = shown && fusion.value === "rrf";
    label.hidden = !shown;
    input.disabled = !shown; // a hidden field is not sent
  }
}

export function fillSettings(base) {
  for (const el of settingFields()) {
    if (el.dataset.kind === "checkbox") el.checked = Boolean(base[el.name]);
    else el.value = base[el.name] ?? "";
  }
  showApplicable(Boolean(base.embedding_model_id));
  document.getElementById("settings-form").dataset.model = base.embedding_model_id || "";
  const button = document.getElementById("embedding-button");
  button.textContent = base.embedding_model_id ? "Switch embedding model" : "Enable embedding";
  document.getElementById("embedding-form").dataset.model = base.embedding_model_id || "";
  document.getElementById("set-embedding").value = base.embedding_model_id || "";
}

function switchText(s) {
  const to = s.to_model;
  const old = s.from_model || "BM25 alone";
  const serving = `${old} serves searches until the swap`;
  if (s.status === "pending") return `Switch to ${to} queued; ${serving}.`;
  if (s.status === "running") {
    if (s.stage === "swapped" || s.stage === "done") {
      return `${to} serves now; dropping ${s.from_model || "nothing"}'s vectors.`;
    }
    const p = s.progress || {};
    let text = `Embedding the stored chunks with ${to}`;
    if (p.total) text += `: ${p.done} of ${p.total}`;
    if (p.rate_per_s) text += ` · ${p.rate_per_s} chunks/s`;
    if (p.eta_s !== undefined && p.eta_s !== null) text += ` · about ${Math.ceil(p.eta_s)} s left`;
    return `${text}; ${serving}.`;
  }
  if (s.status === "completed") return `Done: the base now embeds with ${to}.`;
  if (s.status === "cancelled") return `The switch to ${to} was cancelled; ${old} still serves.`;
  const why = [s.error_code, s.error_message].filter(Boolean).join(": ") || "no reason given";
  return `The switch to ${to} failed (${why}); ${old} still serves.`;
}

function showSwitch(s) {
  const box = document.getElementById("switch");
  box.hidden = false;
  box.dataset.status = s.status;
  document.getElementById("switch-text").textContent = switchText(s);
  const bar = document.getElementById("switch-bar");
  bar.hidden = TERMINAL.has(s.status);
  if (typeof s.percent === "number") bar.value = s.percent;
  else bar.removeAttribute("value"); // indeterminate while queued
}

let following = false;

// Show the switch until it ends, then the base as it is now.
async function followSwitch(baseId, onBase, status) {
  if (following) return;
  following = true;
  const button = document.getElementById("embedding-button");
  button.disabled = true;
  try {
    let s = status;
    for (;;) {
      showSwitch(s);
      if (TERMINAL.has(s.status)) break;
      await new Promise((r) => setTimeout(r, POLL_MS));
      s = await api(`/bases/${enc(baseId)}/model-switch`);
    }
    onBase(await api(`/bases/${enc(baseId)}`));
  } finally {
    following = false;
    button.disabled = false;
  }
}

async function changeModel(baseId, onBase, model) {
  const path = `/bases/${enc(baseId)}`;
  const json = { embedding_model_id: model };
  let s;
  if (document.getElementById("embedding-form").dataset.model) {
    s = await api(`${path}/embedding-model`, { method: "POST", json });
  } else {
    const base = await api(`${path}/enable-embedding`, { method: "POST", json });
    onBase(base);
    s = base.embedding_model_id === model
      ? { job_id: null, status: "swapped", to_model: model } // an empty base: at once
      : await api(`${path}/model-switch`);
  }
  if (s.job_id === null) s = { ...s, status: "completed" };
  notify("", false);
  await followSwitch(baseId, onBase, s);
}

// onBase(base): show the base as the server returned it (settings card and page header).
export async function wireSettings(baseId, onBase) {
  document.getElementById("settings-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const patch = {};
    for (const el of settingFields()) {
      if (el.disabled) continue;
      const value = settingValue(el);
      if (value !== undefined) patch[el.name] = value;
    }
    const error = document.getElementById("settings-error");
    error.hidden = true;
    if (patch.chunk_size !== undefined && patch.chunk_overlap !== undefined
      && patch.chunk_overlap >= patch.chunk_size) {
      // said before asking the server, in the form's own words
      error.textContent = `A chunk of ${patch.chunk_size} tokens cannot share `
        + `${patch.chunk_overlap} tokens with the one before: make the chunk overlap smaller `
        + `than the chunk size (e.g. ${Math.floor(patch.chunk_size / 5)}), or the chunk size `
        + "larger.";
      error.hidden = false;
      document.getElementById("set-chunk-overlap").focus();
      return;
    }
    try {
      onBase(await api(`/bases/${enc(baseId)}`, { method: "PATCH", json: patch }));
      notify("Settings saved.", false);
    } catch (err) {
      showError(err);
    }
  });
  document.getElementById("embedding-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const model = document.getElementById("set-embedding").value.trim();
    try {
      await changeModel(baseId, onBase, model);
    } catch (err) {
      showError(err);
    }
  });
  document.querySelector('#settings-form [name="fusion"]').addEventListener("change", () => {
    showApplicable(Boolean(document.getElementById("settings-form").dataset.model));
  });
  document.getElementById("import-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const file = document.getElementById("import-file").files[0];
    if (!file) return;
    const form = new FormData();
    form.append("file", file, file.name);
    const name = document.getElementById("import-name").value.trim();
    if (name) form.append("name", name);
    try {
      const response = await request("/archives/import", { method: "POST", body: form });
      const body = await response.json();
      if (!response.ok) throw new ApiError(response.status, body);
      notify(`Imported ${body.items} item(s) into the new base ${body.base.name}.`, false);
      e.target.reset();
    } catch (err) {
      showError(err);
    }
  });
  document.getElementById("restore-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const name = document.getElementById("restore-name").value.trim();
    try {
      const out = await api(`/bases/${enc(baseId)}/restore`, { method: "POST", json: { name } });
      const missing = out.skipped_missing_source_count;
      notify(`Restored into ${out.base.name}` + (missing ? ` (${missing} missing source(s))` : "")
        + ".", false);
      e.target.reset();
    } catch (err) {
      showError(err);
    }
  });
  const current = document.getElementById("embedding-form").dataset.model;
  fillModels(document.getElementById("models"), [current]).catch(showError);
  // A switch already under way (or one that ended badly) shows when the page opens. The
  // summary says whether there is one: asking /model-switch of a base that never switched
  // would answer 404 on every page load.
  const summary = await api(`/bases/${enc(baseId)}/summary`).catch(() => null);
  const response = summary && summary.model_switch;
  if (response && response.status !== "completed") {
    followSwitch(baseId, onBase, response).catch(showError);
  }
}
