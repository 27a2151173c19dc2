// One base: the item tree with status badges, failures with code and message, retry and
// delete; adding by drop (files and folders), URL and note; live progress from the SSE stream,
// in chunks too (issue 42). The tree folds, filters and pages (tree.js): a base of thousands
// of files draws one page of rows.
import {
  api, badge, el, enc, errorText, notify, request, showError, start, streamEvents, ApiError,
} from "./common.js";
import { fillSettings, wireSettings } from "./base_settings.js";
import {
  ACTIVE, CONTAINERS, PAGE_SIZE, countItems, leavesByFolder, treeRows,
} from "./tree.js";
import { followChunks } from "./chunks.js";
import { loadChanges, scheduleChanges } from "./changes.js";

const BASE = document.body.dataset.base;
const view = { title, words: "", status: "", folded: new Map(), page: 0 };
let leaves = new Map(); // folder id → the files under it (redrawn with the tree)
const items = new Map(); // id → item (from the list route; statuses patched by events)
const jobs = new Map(); // id → job status
let baseId = null;
let embeds = false; // the base has an embedding model: its chunks are "embedded"
let tracking = null; // {t0, done0} from the moment work was first seen active
const importTracking = new Map(); // root id → {t0, done0}
const selected = new Set(); // item ids ticked in the tree

function title(item) {
  if (item.type === "directory") {
    // a folder shows its own name, not the absolute path it was read from
    const path = (item.data.relative_path || item.data.source || "").replace(/\\/g, "/");
    return path.replace(/\/+$/, "").split("/").pop() || item.id;
  }
  return item.title || item.data.source || item.id;
}

async function retry(item) {
  try {
    await api(`/bases/${enc(baseId)}/items/${enc(item.id)}/reindex?reacquire=false`,
      { method: "POST" });
    notify(`Retrying ${title(item)}.`, false);
  } catch (err) {
    showError(err);
  }
}

async function remove(item) {
  if (!window.confirm(`Delete "${title(item)}" from the base?`)) return;
  try {
    await api(`/bases/${enc(baseId)}/items/${enc(item.id)}`, { method: "DELETE" });
    notify(`Deleting ${title(item)}.`, false);
    await loadItems();
  } catch (err) {
    showError(err);
  }
}

// A folder whose own work succeeded but some of whose files failed: not "failed child_failed",
// but how many of its files failed (the failed files carry their own errors).
function partlyBadge(folder) {
  const under = leaves.get(folder.id) || [];
  const failed = under.filter((i) => i.status === "failed").length;
  // amber, never green: a failure is never shown as success (issue 42)
  const node = badge("partly");
  node.textContent = `${failed} of ${under.length} files failed`;
  return node;
}

function foldButton(item, open) {
  const under = (leaves.get(item.id) || []).length;
  return el("button", {
    type: "button", class: "fold", "aria-expanded": String(open),
    "aria-label": `${open ? "Fold" : "Unfold"} ${title(item)} (${under} files)`,
    onclick: () => {
      view.folded.set(item.id, open);
      render();
    },
  }, open ? "▾" : "▸");
}

function row(item, depth, open) {
  const name = title(item);
  const partly = CONTAINERS.has(item.type) && item.status === "failed"
    && item.error_code === "child_failed";
  const status = el("td", { class: "status" }, partly ? partlyBadge(item) : badge(item.status));
  if (item.status === "failed" && !partly) {
    status.append(
      el("div", { class: "failure" },
        el("code", { class: "error-code" }, item.error_code || "failed"), " ",
        el("span", { class: "error-message" }, item.error_message || "")));
  }
  const skipped = item.data && item.data.skipped;
  if (skipped && Object.keys(skipped).length) {
    // "files" names every skipped entry (issue 41); rows written before kept five "examples".
    const reasons = Object.entries(skipped).map(([reason, { count, files, examples }]) => {
      const named = files || examples || [];
      return el("li", {}, `${reason}: ${count}`, named.length
        ? ` (${named.join(", ")}${count > named.length ? ", …" : ""})` : "");
    });
    const total = Object.values(skipped).reduce((n, r) => n + (r.count || 0), 0);
    status.append(el("details", { class: "skipped" },
      el("summary", {}, `${total} skipped`), el("ul", {}, reasons)));
  }
  const actions = el("td", { class: "actions" });
  // Retry rebuilds from the stored copy: not offered where that cannot help (the server says
  // why: an empty file, a page never fetched), nor on a folder that failed only by its files.
  const canRetry = item.status === "failed" && !item.retry_blocked
    && !(CONTAINERS.has(item.type) && item.error_code === "child_failed");
  if (item.retry_blocked) {
    status.append(el("div", { class: "hint retry-blocked" }, item.retry_blocked));
  }
  if (canRetry) {
    actions.append(el("button", { type: "button", onclick: () => retry(item) },
      "Retry", el("span", { class: "sr-only" }, ` ${name}`)));
  }
  if (item.status !== "deleting") {
    actions.append(el("button", { type: "button", class: "danger", onclick: () => remove(item) },
      "Delete", el("span", { class: "sr-only" }, ` ${name}`)));
  }
  const label = el("span", { class: "title" }, name);
  const folder = CONTAINERS.has(item.type);
  const cell = el("th", { scope: "row", class: folder ? "folder" : "" },
    folder ? foldButton(item, open) : null, label);
  if (folder) {
    cell.append(el("span", { class: "muted" }, ` ${(leaves.get(item.id) || []).length} files`));
  }
  // CSSOM, not a style attribute: the page's CSP refuses inline styles
  cell.style.paddingLeft = `${0.5 + depth * 1.25}rem`;
  if (item.concept_id) cell.append(el("div", { class: "concept" }, item.concept_id));
  const tick = el("input", { type: "checkbox", "aria-label": `Select ${name}`,
    checked: selected.has(item.id), onchange: (e) => {
      if (e.target.checked) selected.add(item.id); else selected.delete(item.id);
      updateSelection();
    } });
  return el("tr", { "data-item": item.id, "data-title": name, "data-status": item.status,
    "aria-level": depth + 1 }, el("td", {}, tick), cell, el("td", { class: "type" }, item.type), status, actions);
}

// Files by status and the folders, at the top of the list; each is a filter (press again: all).
const COUNTED = [
  ["completed", "completed", "s-completed"], ["failed", "failed", "s-failed"],
  ["active", "in progress", "s-embedding"], ["folder", "folders", "s-deleting"],
];

function renderCounts() {
  const counts = countItems(items);
  document.getElementById("item-counts").replaceChildren(...COUNTED.map(([key, word, cls]) =>
    el("li", {}, el("button", {
      type: "button", "data-status": key, "aria-pressed": String(view.status === key),
      onclick: () => {
        view.status = view.status === key ? "" : key;
        view.page = 0;
        render();
        document.getElementById("items-title").scrollIntoView();
      },
    }, el("span", { class: `badge ${cls}` }, word), ` ${counts[key] || 0}`))));
}

function renderPager(total) {
  const pages = Math.max(1, Math.ceil(total / PAGE_SIZE));
  view.page = Math.min(view.page, pages - 1);
  const first = view.page * PAGE_SIZE;
  const pager = document.getElementById("items-pager");
  pager.hidden = total <= PAGE_SIZE;
  const go = (delta) => () => {
    view.page += delta;
    render();
    document.getElementById("items-title").scrollIntoView();
  };
  pager.replaceChildren(
    el("button", { type: "button", disabled: view.page === 0, onclick: go(-1) }, "Previous"),
    el("span", { id: "items-range" },
      `Rows ${total ? first + 1 : 0}–${Math.min(total, first + PAGE_SIZE)} of ${total}`
      + ` · page ${view.page + 1} of ${pages}`),
    el("button", { type: "button", disabled: view.page >= pages - 1, onclick: go(1) }, "Next"));
  return first;
}

function render() {
  leaves = leavesByFolder(items);
  const all = treeRows(items, view);
  const first = renderPager(all.length);
  const rows = all.slice(first, first + PAGE_SIZE).map((r) => row(r.item, r.depth, r.open));
  document.querySelector("#items-table tbody").replaceChildren(...rows);
  document.getElementById("items-empty").hidden = items.size > 0;
  document.getElementById("items-none").hidden = items.size === 0 || all.length > 0;
  renderCounts();
  updateSelection();
  renderProgress();
}

function updateSelection() {
  for (const id of selected) if (!items.has(id)) selected.delete(id);
  for (const id of ["delete-selected", "reindex-selected"]) {
    document.getElementById(id).disabled = selected.size === 0;
  }
}

function rateText(track, done, total, now) {
  if (!track || now <= track.t0) return "";
  const rate = (done - track.done0) / (now - track.t0);
  if (rate <= 0) return "";
  return ` · ${rate.toFixed(1)} items/s · about ${Math.ceil((total - done) / rate)} s left`;
}

function rootOf(item) {
  let cur = item;
  while (cur.group_id && items.has(cur.group_id)) cur = items.get(cur.group_id);
  return cur;
}

function renderImports(now) {
  const byRoot = new Map();
  for (const item of items.values()) {
    if (CONTAINERS.has(item.type) && item.group_id) continue;
    const root = rootOf(item);
    if (!byRoot.has(root.id)) byRoot.set(root.id, { root, leaves: [] });
    if (!CONTAINERS.has(item.type)) byRoot.get(root.id).leaves.push(item);
  }
  const rows = [];
  for (const { root, leaves } of byRoot.values()) {
    const active = ACTIVE.has(root.status) || leaves.some((i) => ACTIVE.has(i.status));
    if (!active) {
      importTracking.delete(root.id);
      continue;
    }
    const done = leaves.filter((i) => i.status === "completed" || i.status === "failed").length;
    if (!importTracking.has(root.id)) importTracking.set(root.id, { t0: now, done0: done });
    const label = `${title(root)}: ${done} of ${leaves.length}`
      + rateText(importTracking.get(root.id), done, leaves.length, now);
    rows.push(el("li", { "data-root": root.id },
      el("span", {}, label),
      el("progress", { max: Math.max(leaves.length, 1), value: done, "aria-label": title(root) })));
  }
  document.getElementById("imports").replaceChildren(...rows);
}

function renderProgress() {
  const leaves = [...items.values()].filter((i) => !CONTAINERS.has(i.type));
  const count = (s) => leaves.filter((i) => i.status === s).length;
  const completed = count("completed");
  const failed = count("failed");
  const active = leaves.filter((i) => ACTIVE.has(i.status)).length;
  const total = leaves.filter((i) => i.status !== "deleting").length;
  const done = completed + failed;
  const runningJobs = [...jobs.values()].filter((s) => s === "pending" || s === "running").length;
  const busy = active > 0 || runningJobs > 0;
  const bar = document.getElementById("progress-bar");
  bar.max = Math.max(total, 1);
  bar.value = total ? done : 0;
  const now = Date.now() / 1000;
  if (busy && !tracking) tracking = { t0: now, done0: done };
  // files only: the table's rows also hold folders, said apart so the numbers add up
  const folders = [...items.values()]
    .filter((i) => CONTAINERS.has(i.type) && i.status !== "deleting").length;
  let text = `${done} of ${total} files done (${completed} completed, ${failed} failed), `
    + `${active} active`;
  if (folders) text += ` · ${folders} folder(s)`;
  if (busy) text += rateText(tracking, done, total, now);
  if (busy) followChunks(baseId, embeds);
  renderImports(now);
  if (!busy) {
    tracking = null;
    if (total) text = `All done: ${text}`;
  }
  document.getElementById("progress-text").textContent = text;
  document.getElementById("progress").dataset.state = busy ? "busy" : "idle";
  document.getElementById("cancel-button").disabled = !busy;
}

async function loadItems() {
  const list = await api(`/bases/${enc(baseId)}/items`);
  items.clear();
  for (const item of list) items.set(item.id, item);
  render();
}

let reloadTimer = null;
function scheduleReload() {
  if (reloadTimer) return;
  reloadTimer = setTimeout(() => {
    reloadTimer = null;
    loadItems().catch(showError);
  }, 250);
}

let renderTimer = null;
function scheduleRender() {
  // a big import sends many events a second: draw the tree at most every 200 ms
  if (renderTimer) return;
  renderTimer = setTimeout(() => {
    renderTimer = null;
    render();
  }, 200);
}

function onEvent(name, data) {
  if (name === "item") {
    const known = items.get(data.id);
    if (data.status === "gone") {
      items.delete(data.id);
    } else if (!known || (CONTAINERS.has(known.type) && known.status !== data.status)
      || (data.status === "failed" && known.status !== "failed")) {
      // (a new failure: the list route says whether a retry can fix it)
      // new rows (titles) and folders (skip reports) come from the list route
      scheduleReload();
    } else {
      Object.assign(known, data);
      known.concept_id = data.status === "completed"
        ? known.data.indexed_relative_path || known.data.relative_path || null : null;
    }
    scheduleRender();
  } else if (name === "job") {
    if (jobs.get(data.id) !== data.status) scheduleChanges(baseId, showError);
    jobs.set(data.id, data.status);
    scheduleRender();
  } else if (name === "base" && data.status === "deleted") {
    notify("This base was deleted.");
  }
}

async function follow() {
  for (;;) {
    try {
      await streamEvents(`/bases/${enc(baseId)}/events`, onEvent);
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) return showError(err);
    }
    await new Promise((r) => setTimeout(r, 2000)); // the stream ended: reconnect
  }
}

// --- adding ---------------------------------------------------------------------------------
async function send(path, form) {
  const response = await request(path, { method: "POST", body: form });
  const body = await response.json();
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

function uploadNotice(added, rejected) {
  // what was really added, and each file left out by name (the server says why)
  let text = `Added ${added} file(s).`;
  if (rejected.length) {
    const names = rejected.slice(0, 10).map((r) => `${r.name} (${r.message})`).join(", ");
    text += ` Not added: ${rejected.length} — ${names}${rejected.length > 10 ? ", …" : ""}.`;
  }
  return text;
}

function addTags() {
  // the Add card's tags, for every upload, URL and note added from it
  return document.getElementById("add-tags").value.split(",").map((t) => t.trim()).filter(Boolean);
}

async function upload(entries) {
  // entries: [{file, path}], path "" for a loose file, "folder/…/name" inside a dropped folder
  const loose = entries.filter((e) => !e.path.includes("/"));
  const inFolders = entries.filter((e) => e.path.includes("/"));
  let added = 0;
  const rejected = [];
  const collect = (batch, body) => {
    rejected.push(...(body.rejected || []));
    added += batch - (body.rejected || []).length;
  };
  try {
    for (let i = 0; i < loose.length; i += 50) {
      const batch = loose.slice(i, i + 50);
      const form = new FormData();
      for (const e of batch) form.append("files", e.file, e.file.name);
      if (addTags().length) form.append("tags", addTags().join(","));
      try {
        collect(batch.length, await send(`/bases/${enc(baseId)}/uploads`, form));
      } catch (err) {
        // every file of the batch refused: name them, go on with the next batch
        const listed = err instanceof ApiError && err.body && err.body.details
          && err.body.details.rejected;
        if (!listed) throw err;
        rejected.push(...listed);
      }
    }
    if (inFolders.length) {
      const form = new FormData();
      for (const e of inFolders) {
        form.append("files", e.file, e.file.name);
        form.append("paths", e.path);
      }
      if (addTags().length) form.append("tags", addTags().join(","));
      collect(inFolders.length, await send(`/bases/${enc(baseId)}/uploads/folders`, form));
    }
    notify(uploadNotice(added, rejected), rejected.length > 0 && added === 0);
    await loadItems();
  } catch (err) {
    if (!added && !rejected.length) return showError(err);
    notify(`${uploadNotice(added, rejected)} Then: ${errorText(err)}`);
    await loadItems();
  }
}

function readAll(reader) {
  return new Promise((resolve, reject) => {
    const out = [];
    const next = () => reader.readEntries((batch) => {
      if (!batch.length) resolve(out);
      else { out.push(...batch); next(); }
    }, reject);
    next();
  });
}

async function walkEntry(entry, out) {
  if (entry.isFile) {
    const file = await new Promise((res, rej) => entry.file(res, rej));
    out.push({ file, path: entry.fullPath.replace(/^\//, "") });
  } else if (entry.isDirectory) {
    for (const child of await readAll(entry.createReader())) await walkEntry(child, out);
  }
}

async function onDrop(event) {
  event.preventDefault();
  event.currentTarget.classList.remove("over");
  const out = [];
  const entries = [...event.dataTransfer.items]
    .map((i) => (i.webkitGetAsEntry ? i.webkitGetAsEntry() : null));
  if (entries.length && entries.every(Boolean)) {
    for (const entry of entries) await walkEntry(entry, out);
  } else {
    for (const file of event.dataTransfer.files) {
      out.push({ file, path: file.webkitRelativePath || file.name });
    }
  }
  if (out.length) await upload(out);
}

function pickerEntries(input) {
  return [...input.files].map((file) => ({ file, path: file.webkitRelativePath || file.name }));
}

async function addInputs(inputs, what) {
  const tags = addTags();
  if (tags.length) inputs = inputs.map((i) => ({ ...i, tags }));
  try {
    await api(`/bases/${enc(baseId)}/items`, { method: "POST", json: { inputs } });
    notify(`Added ${what}.`, false);
    await loadItems();
    return true;
  } catch (err) {
    showError(err);
    return false;
  }
}

async function onSelection(action) {
  const ids = [...selected];
  if (!ids.length) return;
  if (action === "delete" && !window.confirm(`Delete ${ids.length} selected item(s)?`)) return;
  try {
    for (const id of ids) {
      const path = `/bases/${enc(baseId)}/items/${enc(id)}`;
      if (action === "delete") await api(path, { method: "DELETE" });
      else await api(`${path}/reindex`, { method: "POST" });
    }
    selected.clear();
    notify(`${action === "delete" ? "Deleting" : "Reindexing"} ${ids.length} item(s).`, false);
    await loadItems();
  } catch (err) {
    showError(err);
  }
}

function wireTree() {
  const filter = document.getElementById("items-filter");
  filter.addEventListener("input", () => {
    view.words = filter.value;
    view.page = 0;
    render();
  });
}

function wireAdding() {
  document.getElementById("delete-selected").addEventListener("click", () => onSelection("delete"));
  document.getElementById("reindex-selected")
    .addEventListener("click", () => onSelection("reindex"));
  const zone = document.getElementById("dropzone");
  zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("over"); });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", onDrop);
  for (const id of ["pick-files", "pick-folder"]) {
    const input = document.getElementById(id);
    input.addEventListener("change", async () => {
      await upload(pickerEntries(input));
      input.value = "";
    });
  }
  document.getElementById("url-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const url = document.getElementById("url-input").value.trim();
    const type = /\.xml($|\?)/i.test(url) ? "sitemap" : "url";
    if (await addInputs([{ type, url }], url)) e.target.reset();
  });
  document.getElementById("note-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const content = document.getElementById("note-text").value;
    const noteTitle = document.getElementById("note-title").value.trim() || undefined;
    if (await addInputs([{ type: "note", content, title: noteTitle }], "a note")) e.target.reset();
  });
  document.getElementById("cancel-button").addEventListener("click", async () => {
    try {
      const out = await api(`/bases/${enc(baseId)}/jobs/cancel`, { method: "POST" });
      notify(`Cancelled ${out.cancelled.length} job(s).`, false);
    } catch (err) {
      showError(err);
    }
  });
}

function showBase(base) {
  embeds = Boolean(base.embedding_model_id);
  // the base's own status only when it is not the usual one (the items' state is below)
  const status = base.status === "completed" ? "" : `${base.status} · `;
  document.getElementById("base-info").textContent =
    `${status}${base.embedding_model_id || "BM25 only"} · chunks of ${base.chunk_size} tokens`;
  fillSettings(base);
}

function showMissing(err) {
  // no such base: no forms to fill in for it, a way back instead
  for (const node of document.querySelectorAll("main > section, main > p")) node.hidden = true;
  document.getElementById("base-info").hidden = false;
  document.getElementById("base-info").replaceChildren(
    `There is no base named "${BASE}". `, el("a", { href: "/" }, "See all bases"), ".");
  document.body.dataset.missing = "1";
  showError(err);
}

start(async () => {
  let base;
  try {
    base = await api(`/bases/${enc(BASE)}`);
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) return showMissing(err);
    throw err;
  }
  baseId = base.id;
  showBase(base);
  wireAdding();
  wireTree();
  wireSettings(baseId, showBase).catch(showError);
  await loadItems();
  loadChanges(baseId).catch(showError);
  follow();
});
