// The document viewer: the cited range of a Concept, highlighted and scrolled to, with the
// neighbouring text and the page/sheet it lies on.
import { api, el, enc, highlight, locatorText, start } from "./common.js";

const CONTEXT = 3000; // characters shown on each side of the cited range

start(async () => {
  const p = new URLSearchParams(location.search);
  const base = p.get("base");
  const concept = p.get("concept");
  const begin = Number(p.get("start") || 0);
  const end = Number(p.get("end") || begin);
  const query = p.get("q") || "";
  if (query) {
    document.getElementById("back-link").href =
      `/console/search?base=${enc(base)}&q=${enc(query)}`;
  }
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
  const text = doc.content;
  const a = begin - doc.char_start;
  const b = Math.min(text.length, end - doc.char_start);
  const cited = el("mark", { id: "cited", class: "cited", tabindex: "-1" });
  highlight(cited, text.slice(a, b), query);
  const body = document.getElementById("doc-body");
  body.replaceChildren(
    doc.char_start > 0 ? el("span", { class: "muted" }, "…") : "",
    text.slice(0, a), cited, text.slice(b), doc.truncated ? el("span", { class: "muted" }, "…") : "");
  cited.scrollIntoView({ block: "center" });
  cited.focus({ preventScroll: true });
});
