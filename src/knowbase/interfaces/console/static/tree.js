// The base page's item tree at any size (issue 42): which rows show, given folded folders, a
// filter (words in the title or Concept ID, and a status), and a page of PAGE_SIZE rows. A big
// base opens with its nested folders folded; a filter shows every match with its folders.

export const PAGE_SIZE = 50;
export const CONTAINERS = new Set(["directory", "sitemap"]);
export const ACTIVE = new Set(["idle", "preparing", "processing", "reading", "embedding"]);

// "completed", "failed", "active" or "folder": what the counts at the top count.
export function statusGroup(item) {
  if (CONTAINERS.has(item.type)) return "folder";
  if (ACTIVE.has(item.status)) return "active";
  return item.status;
}

// Files by status, and folders: {completed, failed, active, folder, deleting}.
export function countItems(items) {
  const out = { completed: 0, failed: 0, active: 0, folder: 0 };
  for (const item of items.values()) {
    if (item.status === "deleting") continue;
    const group = statusGroup(item);
    out[group] = (out[group] || 0) + 1;
  }
  return out;
}

// The rows to draw: [{item, depth, folder, open}] in tree order, before paging.
// view: {title(item), words, status, folded: Map(id → bool)}.
export function treeRows(items, view) {
  const children = new Map();
  for (const item of items.values()) {
    const key = item.group_id && items.has(item.group_id) ? item.group_id : "";
    if (!children.has(key)) children.set(key, []);
    children.get(key).push(item);
  }
  for (const list of children.values()) {
    // folders first, then by name
    list.sort((a, b) => (CONTAINERS.has(b.type) - CONTAINERS.has(a.type))
      || view.title(a).localeCompare(view.title(b)));
  }
  const words = (view.words || "").toLowerCase().split(/\s+/).filter(Boolean);
  const filtering = words.length > 0 || Boolean(view.status);
  let shown = null; // with a filter: the matches and the folders above them
  if (filtering) {
    shown = new Set();
    for (const item of items.values()) {
      const hay = `${view.title(item)} ${item.concept_id || ""}`.toLowerCase();
      const okWords = words.every((w) => hay.includes(w));
      const okStatus = !view.status || statusGroup(item) === view.status;
      if (!okWords || !okStatus) continue;
      for (let cur = item; cur && !shown.has(cur.id); cur = items.get(cur.group_id)) {
        shown.add(cur.id);
      }
    }
  }
  const big = items.size > PAGE_SIZE;
  const rows = [];
  const walk = (key, depth) => {
    for (const item of children.get(key) || []) {
      if (shown && !shown.has(item.id)) continue;
      const folder = CONTAINERS.has(item.type);
      const chosen = view.folded.get(item.id);
      const open = filtering || !folder ? true : chosen === undefined ? !(big && depth >= 1) : !chosen;
      rows.push({ item, depth, folder, open });
      if (open) walk(item.id, depth + 1);
    }
  };
  walk("", 0);
  return rows;
}

// The leaves under each folder, counted once for every folder: id → [leaf items].
export function leavesByFolder(items) {
  const out = new Map();
  for (const item of items.values()) {
    if (CONTAINERS.has(item.type) || item.status === "deleting") continue;
    for (let cur = items.get(item.group_id); cur; cur = items.get(cur.group_id)) {
      if (!out.has(cur.id)) out.set(cur.id, []);
      out.get(cur.id).push(item);
    }
  }
  return out;
}
