// A base's recent changes: its newest jobs with who asked for each (the API key and the
// surface: http, console, mcp or cli), from GET /bases/{base}/jobs.
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
  const jobs = await api(`/bases/${enc(baseId)}/jobs?limit=${SHOWN}`);
  // only what someone asked for: the jobs those jobs start carry the same key
  const rows = jobs.filter((j) => !j.parent_id).map((j) => el("tr", {},
    el("td", {}, when(j.created_at)),
    el("td", {}, j.kind.replace(/^knowledge\./, "")),
    el("td", {}, j.status),
    el("td", { class: "by" }, who(j)),
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
