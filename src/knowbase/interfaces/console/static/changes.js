// A base's recent changes with who asked for each (the API key and the surface: http, console,
// mcp or cli): its newest jobs (GET /bases/{base}/jobs) and the changes that start no job
// (created, settings changed: GET /bases/{base}/changes), newest first.
import { api, el, enc } from "./common.js";

const SHOWN = 20;

function when(ms) {
  return new Date(ms).toISOString().replace("T", " ").slice(0, 19) + " UTC";
}

function who(job) {
  if (!job.by_key && !job.by_surface) return "—";
  return `${job.by_key || "(no key)"} via ${job.by_surface || "?"}`;
}

export async function loadChanges(baseId) {
  const [jobs, changes] = await Promise.all([
    api(`/bases/${enc(baseId)}/jobs?limit=${SHOWN}`),
    api(`/bases/${enc(baseId)}/changes?limit=${SHOWN}`),
  ]);
  // only what someone asked for: the jobs those jobs start carry the same key
  const entries = jobs.filter((j) => !j.parent_id).map((j) => ({
    at: j.created_at, what: j.kind.replace(/^knowledge\./, ""), status: j.status, by: who(j),
  })).concat(changes.map((c) => ({
    at: c.at,
    what: c.action === "settings" ? `settings: ${Object.keys(c.details).join(", ")}`
      : c.action === "labels" ? `labels: ${c.details.item}` : c.action,
    status: "done",
    by: who(c),
  })));
  entries.sort((a, b) => b.at - a.at);
  const rows = entries.slice(0, SHOWN).map((e) => el("tr", {},
    el("td", {}, when(e.at)),
    el("td", {}, e.what),
    el("td", {}, e.status),
    el("td", { class: "by" }, e.by),
  ));
  document.querySelector("#changes-table tbody").replaceChildren(...rows);
  document.getElementById("changes-empty").hidden = rows.length > 0;
}

let timer = null;
export function scheduleChanges(baseId, onError) {
  // a burst of job events reloads the list once
  if (timer) return;
  timer = setTimeout(() => {
    timer = null;
    loadChanges(baseId).catch(onError);
  }, 500);
}
