// Search one base or several; results with title, Concept ID, locator, matched terms and score
// kind; each shows its snippet (the best-matching lines, as `kb search` does) rendered as
// Markdown, "More" shows the whole passage, and the list ends where the threshold cut. Each
// opens the document viewer at its cited range; the viewer's "Back to search" keeps every
// base that was ticked.
import { api, el, enc, locatorText, showError, start } from "./common.js";
import { renderMarkdown } from "./markdown.js";

const params = new URLSearchParams(location.search);

function chosenBases() {
  return [...document.querySelectorAll("#search-bases input:checked")].map((i) => i.value);
}

function viewerHref(r, query) {
  const p = new URLSearchParams({
    base: r.base_id, concept: r.concept_id || "", start: r.char_start, end: r.char_end, q: query,
    bases: chosenBases().join(","),
  });
  return `/console/view?${p}`;
}

// The snippet as Markdown: a matched table row gets its table's header above it.
function snippetText(r) {
  const s = r.snippet;
  if (!s || !s.text) return r.text;
  let text = s.text;
  if (s.header) {
    const lines = text.split("\n");
    const at = lines.findIndex((l) => l.trim().startsWith("|"));
    if (at >= 0) {
      const rule = `|${" --- |".repeat(Math.max(1, s.header.split("|").length - 2))}`;
      lines.splice(at, 0, s.header, rule);
      text = lines.join("\n");
    }
  }
  return text;
}

function passage(r, query) {
  const box = el("div", { class: "passage" });
  const short = snippetText(r);
  const whole = short !== r.text;
  const show = (full) => {
    const body = renderMarkdown(full ? r.text : short, query);
    const parts = [body];
    if (!full && r.snippet && r.snippet.before) parts.unshift(el("span", { class: "muted" }, "…"));
    if (!full && r.snippet && r.snippet.after) parts.push(el("span", { class: "muted" }, "…"));
    box.replaceChildren(...parts);
  };
  show(false);
  if (!whole) return [box];
  const more = el("button", { type: "button", class: "more", "aria-expanded": "false" }, "More");
  more.addEventListener("click", () => {
    const open = more.getAttribute("aria-expanded") !== "true";
    show(open);
    more.setAttribute("aria-expanded", String(open));
    more.textContent = open ? "Less" : "More";
  });
  return [box, more];
}

function result(r, query, showBase) {
  const where = locatorText(r.locator);
  return el("li", { class: "result", "data-concept": r.concept_id || "" },
    el("h2", {}, el("a", { href: viewerHref(r, query), class: "open" }, r.title || r.concept_id)),
    el("p", { class: "meta" },
      showBase ? el("span", { class: "base" }, r.base_name) : null,
      el("code", { class: "concept" }, r.concept_id || ""),
      where ? el("span", { class: "where" }, where) : null,
      el("span", { class: "score" },
        `${r.score_kind} score ${r.score.toFixed(4)}`)),
    ...passage(r, query));
}

// Where the threshold cut: after the last result, how many weaker hits it left out (for
// several bases, each base's cut, named).
function cutNote(cuts, names) {
  const parts = [];
  for (const [id, t] of Object.entries(cuts)) {
    const source = t.source === "base" ? "this base's threshold" : "the default threshold";
    const whose = names.size > 1 ? `${names.get(id) || id}: ` : "";
    parts.push(t.cut
      ? `${whose}Threshold ${t.value} (${source}): ${t.cut} weaker hit(s) below it are not shown.`
      : `${whose}Threshold ${t.value} (${source}): no hit fell below it.`);
  }
  return parts.length ? el("li", { class: "cut", role: "note" }, parts.join(" ")) : null;
}

async function run(event) {
  if (event) event.preventDefault();
  const query = document.getElementById("search-query").value.trim();
  const chosen = chosenBases();
  const summary = document.getElementById("search-summary");
  if (!chosen.length) {
    summary.textContent = "Tick at least one base.";
    return;
  }
  if (!query) return;
  summary.textContent = "Searching…";
  try {
    let body;
    if (chosen.length === 1) {
      body = await api(`/bases/${enc(chosen[0])}/search?q=${enc(query)}&explain=true`);
    } else {
      body = await api("/search", { method: "POST", json: { query, bases: chosen } });
    }
    const list = document.getElementById("results");
    const cuts = body.thresholds
      || (body.explain && body.explain.threshold ? { [chosen[0]]: body.explain.threshold } : {});
    const names = new Map([...document.querySelectorAll("#search-bases input")]
      .filter((i) => i.checked).map((i) => [i.value, i.parentElement.textContent.trim()]));
    const note = cutNote(cuts, names);
    list.replaceChildren(...body.results.map((r) => result(r, query, chosen.length > 1)),
      ...(note ? [note] : []));
    const mode = body.mode || Object.values(body.modes || {}).join(", ");
    const cut = Object.values(cuts).reduce((n, t) => n + (t.cut || 0), 0);
    summary.textContent = `${body.results.length} result(s) · mode ${mode}`
      + (cut ? ` · ${cut} below the threshold` : "");
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
  const box = document.getElementById("search-bases");
  // one chip per base: a checkbox with its name beside it, every selected one kept in the URL
  box.append(...bases.map((b) => el("label", { class: "chip" },
    el("input", {
      type: "checkbox", value: b.id, name: "base",
      checked: wanted.has(b.name) || wanted.has(b.id) || bases.length === 1,
    }), ` ${b.name}`)));
  document.getElementById("search-form").addEventListener("submit", run);
  if (params.get("q")) {
    document.getElementById("search-query").value = params.get("q");
    await run();
  }
});
