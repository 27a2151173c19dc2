// A small Markdown renderer for passages (issue 42): headings, tables, lists, fenced code,
// paragraphs, **bold** and `code`. It builds DOM nodes holding text only (never innerHTML), so
// whatever a document holds (<script>, on*= attributes, javascript: links) shows as text:
// sanitised by construction. Query words are marked with highlight(). No dependency: the
// console works offline.
import { el, highlight } from "./common.js";

const FENCE = /^\s*(```|~~~)/;
const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$/;
const ROW = /^\s*\|.*\|\s*$/;
const ITEM = /^\s*([-*+]|\d{1,9}[.)])\s+(.*)$/;

// Inline: `code` and **bold**; the rest is text with the query's words marked.
function inline(node, text, query) {
  const re = /`([^`\n]+)`|\*\*([^*\n]+)\*\*/g;
  let last = 0;
  for (const m of text.matchAll(re)) {
    highlight(node, text.slice(last, m.index), query);
    if (m[1] !== undefined) node.append(el("code", {}, m[1]));
    else {
      const strong = el("strong");
      highlight(strong, m[2], query);
      node.append(strong);
    }
    last = m.index + m[0].length;
  }
  highlight(node, text.slice(last), query);
  return node;
}

function cells(line) {
  let body = line.trim();
  if (body.startsWith("|")) body = body.slice(1);
  if (body.endsWith("|") && !body.endsWith("\\|")) body = body.slice(0, -1);
  return body.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, "|"));
}

function table(header, rows, query) {
  const t = el("table", { class: "md-table" });
  if (header) {
    t.append(el("thead", {}, el("tr", {}, cells(header).map((c) => inline(el("th"), c, query)))));
  }
  t.append(el("tbody", {}, rows.map((r) => el("tr", {},
    cells(r).map((c) => inline(el("td"), c, query))))));
  return el("div", { class: "md-scroll" }, t);
}

// Lines with their offsets in text.
function lines(text) {
  const out = [];
  let at = 0;
  for (const line of text.split("\n")) {
    out.push({ line, start: at, end: at + line.length });
    at += line.length + 1;
  }
  return out;
}

// Render text as blocks: [{node, start, end}] in order (offsets in text), so a caller can mark
// the blocks of a cited range. headingLevel: the HTML level a "#" heading becomes.
export function markdownBlocks(text, query = "", { headingLevel = 3 } = {}) {
  const ls = lines(text);
  const blocks = [];
  let i = 0;
  const push = (node, from, to) => blocks.push({ node, start: ls[from].start, end: ls[to].end });
  while (i < ls.length) {
    const { line } = ls[i];
    if (!line.trim()) { i += 1; continue; }
    const from = i;
    if (FENCE.test(line)) {
      const mark = line.trim().slice(0, 3);
      const body = [];
      i += 1;
      while (i < ls.length && !ls[i].line.trim().startsWith(mark)) body.push(ls[i++].line);
      const to = Math.min(i, ls.length - 1);
      i += 1;
      push(el("pre", { class: "md-code" }, el("code", {}, body.join("\n"))), from, to);
      continue;
    }
    const h = HEADING.exec(line);
    if (h) {
      const level = Math.min(6, headingLevel + h[1].length - 1);
      push(inline(el(`h${level}`, { class: "md-h" }), h[2], query), from, i);
      i += 1;
      continue;
    }
    if (ROW.test(line)) {
      let header = null;
      if (i + 1 < ls.length && RULE.test(ls[i + 1].line)) {
        header = line;
        i += 2;
      }
      const rows = [];
      while (i < ls.length && ROW.test(ls[i].line)) {
        if (!RULE.test(ls[i].line)) rows.push(ls[i].line);
        i += 1;
      }
      push(table(header, rows, query), from, i - 1);
      continue;
    }
    if (ITEM.test(line)) {
      const ordered = /^\s*\d/.test(line);
      const list = el(ordered ? "ol" : "ul", { class: "md-list" });
      while (i < ls.length && ITEM.test(ls[i].line)) {
        list.append(inline(el("li"), ITEM.exec(ls[i].line)[2], query));
        i += 1;
      }
      push(list, from, i - 1);
      continue;
    }
    const para = [];
    while (i < ls.length && ls[i].line.trim() && !FENCE.test(ls[i].line)
      && !HEADING.test(ls[i].line) && !ROW.test(ls[i].line) && !ITEM.test(ls[i].line)) {
      para.push(ls[i].line);
      i += 1;
    }
    push(inline(el("p", { class: "md-p" }), para.join("\n"), query), from, i - 1);
  }
  return blocks;
}

// Render text into a new <div class="md">.
export function renderMarkdown(text, query = "", options = {}) {
  return el("div", { class: "md" }, markdownBlocks(text, query, options).map((b) => b.node));
}
