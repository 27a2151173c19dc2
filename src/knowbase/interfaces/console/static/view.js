// The document viewer: the cited range of a Concept, highlighted and scrolled to, with the
// neighbouring text and the page/sheet it lies on. The text is rendered as Markdown (tables,
// headings, lists; text only, see markdown.js); the blocks that hold the cited range are
// wrapped in #cited. "Back to search" returns to the search with every base it had ticked.
import { api, el, enc, locatorText, start } from "./common.js";
import { markdownBlocks } from "./markdown.js";

const CONTEXT = 3000; // characters shown on each side of the cited range

start(async () => {
  const p = new URLSearchParams(location.search);
  const base = p.get("base");
  const concept = p.get("concept");
  const begin = Number(p.get("start") || 0);
  const end = Number(p.get("end") || begin);
  const query = p.get("q") || "";
  const back = new URLSearchParams({ base: p.get("bases") || base });
  if (query) back.set("q", query);
  document.getElementById("back-link").href = `/console/search?${back}`;
  const from = Math.max(0, begin - CONTEXT);
  const doc = await api(`/bases/${enc(base)}/concepts/read?concept_id=${enc(concept)}`
    + `&char_start=${from}&char_end=${end + CONTEXT}`);
  document.title = `${doc.title} · knowbase`;
  document.getElementById("doc-title").textContent = doc.title;
  document.getElementById("doc-meta").textContent =
    `${doc.concept_id} · characters ${begin}–${end} of ${doc.total_chars}`;
  const spans = doc.locators.filter((s) => s.char_start < end && s.char_end > begin);
  const where = [...new Set(spans.map((s) => locatorText(s.locator)).filter(Boolean))];
  document.getElementById("doc-where").textContent =
    where.length ? `Cited from ${where.join("; ")}` : "";
  const a = begin - doc.char_start;
  const b = Math.max(a + 1, Math.min(doc.content.length, end - doc.char_start));
  const cited = el("div", { id: "cited", class: "cited", tabindex: "-1" });
  const nodes = [];
  for (const block of markdownBlocks(doc.content, query)) {
    if (block.end > a && block.start < b) {
      if (!cited.childNodes.length) nodes.push(cited);
      cited.append(block.node);
    } else {
      nodes.push(block.node);
    }
  }
  if (!cited.childNodes.length) nodes.push(cited);
  const body = document.getElementById("doc-body");
  body.replaceChildren(
    doc.char_start > 0 ? el("p", { class: "muted" }, "…") : "",
    ...nodes, doc.truncated ? el("p", { class: "muted" }, "…") : "");
  cited.scrollIntoView({ block: "center" });
  cited.focus({ preventScroll: true });
});
