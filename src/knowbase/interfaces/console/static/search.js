// Search one base or several; results with title, Concept ID, locator, matched terms and score
// kind; each opens the document viewer at its cited range.
import { api, el, enc, highlight, locatorText, showError, start } from "./common.js";

const params = new URLSearchParams(location.search);

function viewerHref(r, query) {
  const p = new URLSearchParams({
    base: r.base_id, concept: r.concept_id || "", start: r.char_start, end: r.char_end, q: query,
  });
  return `/console/view?${p}`;
}

function result(r, query, showBase) {
  const where = locatorText(r.locator);
  const text = el("p", { class: "snippet" });
  highlight(text, r.text, query);
  return el("li", { class: "result", "data-concept": r.concept_id || "" },
    el("h2", {}, el("a", { href: viewerHref(r, query), class: "open" }, r.title || r.concept_id)),
    el("p", { class: "meta" },
      showBase ? el("span", { class: "base" }, r.base_name) : null,
      el("code", { class: "concept" }, r.concept_id || ""),
      where ? el("span", { class: "where" }, where) : null,
      el("span", { class: "score" },
        `${r.score_kind} score ${r.score.toFixed(4)}`)),
    text);
}

async function run(event) {
  if (event) event.preventDefault();
  const query = document.getElementById("search-query").value.trim();
  const chosen = [...document.getElementById("search-bases").selectedOptions].map((o) => o.value);
  if (!query || !chosen.length) return;
  const summary = document.getElementById("search-summary");
  summary.textContent = "Searching…";
  try {
    let body;
    if (chosen.length === 1) {
      body = await api(`/bases/${enc(chosen[0])}/search?q=${enc(query)}`);
    } else {
      body = await api("/search", { method: "POST", json: { query, bases: chosen } });
    }
    const list = document.getElementById("results");
    list.replaceChildren(...body.results.map((r) => result(r, query, chosen.length > 1)));
    const mode = body.mode || Object.values(body.modes || {}).join(", ");
    summary.textContent = `${body.results.length} result(s) · mode ${mode}`;
    document.getElementById("explain-body").textContent =
      JSON.stringify(body.explain || body.modes, null, 2);
    const url = new URL(location.href);
    url.searchParams.set("q", query);
    url.searchParams.set("base", chosen.join(","));
    history.replaceState(null, "", url);
  } catch (err) {
    summary.textContent = "";
    showError(err);
  }
}

start(async () => {
  const bases = await api("/bases");
  const wanted = new Set((params.get("base") || document.body.dataset.base || "").split(","));
  const select = document.getElementById("search-bases");
  select.replaceChildren(...bases.map((b) => el("option", {
    value: b.id, selected: wanted.has(b.name) || wanted.has(b.id) || bases.length === 1,
  }, b.name)));
  select.size = Math.min(Math.max(bases.length, 2), 10); // every base in view, up to ten rows
  document.getElementById("search-form").addEventListener("submit", run);
  if (params.get("q")) {
    document.getElementById("search-query").value = params.get("q");
    await run();
  }
});
