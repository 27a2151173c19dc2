// Shared by every console page: API calls with the tab's token, the readiness banner, notices.
// The token lives in sessionStorage (this tab only) and travels only in the Authorization
// header, never in a URL; the event stream is read with fetch for the same reason.

const TOKEN_KEY = "knowbase.token";

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

function headers(extra = {}) {
  // the surface header labels the jobs the console starts (who asked: the key, via console)
  const token = sessionStorage.getItem(TOKEN_KEY);
  const mine = { ...extra, "X-Knowbase-Surface": "console" };
  return token ? { ...mine, Authorization: `Bearer ${token}` } : mine;
}

let asking = null;

function askToken(refused) {
  // One dialog for all the requests that were refused at the same time.
  if (asking) return asking;
  const dialog = document.getElementById("token-dialog");
  const input = document.getElementById("token-input");
  document.getElementById("token-error").hidden = !refused;
  asking = new Promise((resolve) => {
    dialog.addEventListener(
      "close",
      () => {
        sessionStorage.setItem(TOKEN_KEY, input.value);
        input.value = "";
        asking = null;
        resolve();
      },
      { once: true },
    );
  });
  dialog.showModal();
  input.focus();
  return asking;
}

export class ApiError extends Error {
  constructor(status, body) {
    super(body.message || `HTTP ${status}`);
    this.status = status;
    this.code = body.code || `http_${status}`;
    this.body = body;
  }
}

// fetch with the token; on 401 ask for it (again) and retry.
export async function request(path, options = {}) {
  for (;;) {
    const hadToken = sessionStorage.getItem(TOKEN_KEY) !== null;
    const response = await fetch(path, { ...options, headers: headers(options.headers) });
    if (response.status !== 401) return response;
    await askToken(hadToken);
  }
}

export async function api(path, options = {}) {
  const opts = { ...options };
  if (opts.json !== undefined) {
    opts.body = JSON.stringify(opts.json);
    opts.headers = { ...(opts.headers || {}), "Content-Type": "application/json" };
    delete opts.json;
  }
  const response = await request(path, opts);
  const text = await response.text();
  const body = text ? JSON.parse(text) : null;
  if (!response.ok) throw new ApiError(response.status, body || {});
  return body;
}

export function enc(value) {
  return encodeURIComponent(value);
}

export function notify(message, isError = true) {
  const box = document.getElementById("notice");
  box.textContent = message;
  box.className = isError ? "notice error" : "notice";
  box.hidden = !message;
}

// code: message, and the server's hint (what to do about it) when it gives one
export function errorText(err) {
  if (!(err instanceof ApiError)) return String(err);
  const hint = err.body && err.body.hint;
  return `${err.code}: ${err.message}${hint ? ` — ${hint}` : ""}`;
}

export function showError(err) {
  notify(errorText(err));
}

// Server-Sent Events over fetch (EventSource cannot send a header). Calls onEvent(name, data)
// per event until the stream ends or signal aborts; resolves when it ends.
export async function streamEvents(path, onEvent, signal) {
  const response = await request(path, { signal, headers: { Accept: "text/event-stream" } });
  if (!response.ok) throw new ApiError(response.status, await response.json());
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let name = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
      }
      if (data.length) onEvent(name, JSON.parse(data.join("\n")));
    }
  }
}

export async function showReadiness() {
  const box = document.getElementById("readiness");
  try {
    const status = await api("/status");
    const bad = status.components.filter((c) => c.status !== "ready");
    box.replaceChildren();
    if (status.status === "ready" || !bad.length) {
      box.hidden = true;
      return;
    }
    box.className = `banner ${status.status}`;
    box.append(el("strong", {}, `knowbase is ${status.status}: `));
    const list = el("ul");
    for (const c of bad) {
      const who = c.base_name ? ` (${c.base_name})` : "";
      list.append(el("li", {}, `${c.component}${who}: ${c.status}, ${c.reason}`));
    }
    box.append(list);
    box.hidden = false;
  } catch (err) {
    box.className = "banner unavailable";
    box.textContent = `The server cannot be reached: ${err.message}`;
    box.hidden = false;
  }
}

// Fill a <datalist> with the embedding models this server offers (GET /embedding-models): the
// local models (labelled when their extra is missing), each remote profile as a prefix to
// complete, the test model when enabled; then `extra` ids (models the bases already use).
let offered = null; // asked once per page load (checking the local models reads their files)

export async function fillModels(datalist, extra = []) {
  offered ??= api("/embedding-models").catch((err) => { offered = null; throw err; });
  const models = await offered;
  const ids = new Set(models.map((m) => m.id));
  const options = models.map((m) => el("option", {
    value: m.id,
    label: m.kind === "profile" || !m.available ? m.reason : "installed",
    "data-available": m.available ? "1" : "0",
  }));
  for (const id of extra) {
    if (id && !ids.has(id)) {
      ids.add(id);
      options.push(el("option", { value: id, label: "in use" }));
    }
  }
  datalist.replaceChildren(...options);
}

export function badge(status) {
  return el("span", { class: `badge s-${status}` }, status);
}

export function locatorText(locator) {
  if (!locator) return "";
  const parts = [];
  if (locator.page !== undefined) parts.push(`page ${locator.page}`);
  if (locator.sheet !== undefined) parts.push(`sheet ${locator.sheet}`);
  if (locator.slide !== undefined) parts.push(`slide ${locator.slide}`);
  const heading = locator.heading; // the Markdown heading path, outermost first
  if (Array.isArray(heading) && heading.length) parts.push(heading.join(" › "));
  else if (typeof heading === "string" && heading) parts.push(heading);
  return parts.join(", ");
}

// Append text to node with the query's words marked (case-insensitive, whole text kept).
// The short English stopword list the keyword lane drops: marking "is" or "the" says nothing.
const STOPWORDS = new Set(("a an and are as at be but by for from has have in is it its of on or "
  + "that the this to was were will with not no do does did can could should would what which "
  + "who whom how when where why if then than so such").split(" "));
const CJK = /[\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}\p{Script=Hangul}]/u;

// Mark the query's words in text: whole words only, the word a term begins (so "otter" marks
// "otters" but "is" never marks the middle of "dispositions"), stopwords left alone. CJK text
// has no spaces between words, so a CJK term is marked wherever it occurs.
export function highlight(node, text, query) {
  const words = [...new Set(query.toLowerCase().match(/[\p{L}\p{N}]{2,}/gu) || [])]
    .filter((w) => CJK.test(w) || !STOPWORDS.has(w));
  if (!words.length) {
    node.append(text);
    return;
  }
  const escaped = words.map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  const spaced = escaped.filter((w, i) => !CJK.test(words[i]));
  const cjk = escaped.filter((w, i) => CJK.test(words[i]));
  const parts = [];
  if (spaced.length) parts.push(`(?<![\\p{L}\\p{N}])(?:${spaced.join("|")})[\\p{L}\\p{N}]*`);
  if (cjk.length) parts.push(`(?:${cjk.join("|")})`);
  const re = new RegExp(parts.join("|"), "giu");
  let last = 0;
  for (const m of text.matchAll(re)) {
    node.append(text.slice(last, m.index), el("mark", {}, m[0]));
    last = m.index + m[0].length;
  }
  node.append(text.slice(last));
}

export function start(main) {
  // Forms are handled by script only: a native submit (a click before the handlers are wired)
  // would reload the page and drop what was typed.
  // (A method="dialog" form closes its dialog by submitting: leave that one alone.)
  document.addEventListener("submit", (e) => {
    if (e.target.method !== "dialog") e.preventDefault();
  }, true);
  document.addEventListener("DOMContentLoaded", () => {
    showReadiness();
    setInterval(showReadiness, 15000);
    main()
      .catch(showError)
      .finally(() => { document.body.dataset.ready = "1"; });
  });
}
