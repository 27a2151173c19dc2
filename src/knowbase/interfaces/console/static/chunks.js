// The base page's progress in chunks (issue 42): on a base with a model the work is embedding
// chunks, and "56 of 120 files" stands still for minutes while they embed. While the base is
// busy, GET /bases/{b}/progress is asked every POLL_MS; the rate is the chunks done since the
// first answer that had any, over the time since.
import { api, enc } from "./common.js";

const POLL_MS = 2000;
let polling = false;

function duration(s) {
  s = Math.round(s);
  if (s < 90) return `${s} s`;
  const m = Math.floor(s / 60);
  return m < 60 ? `${m} min ${String(s % 60).padStart(2, "0")} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
}

export function chunkText(p, embeds, rate) {
  if (!p.files_chunked) return "Reading and chunking the first files…";
  const approx = p.files_chunked + p.files_failed < p.files ? "≈" : "";
  const verb = embeds ? "embedded" : "indexed";
  let text = `Chunks: ${p.chunks_done.toLocaleString("en")} of ${approx}`
    + `${p.chunks_estimated.toLocaleString("en")} ${verb}`;
  if (rate > 0) {
    text += ` · ${rate.toFixed(1)} chunks/s`;
    const left = p.chunks_estimated - p.chunks_done;
    if (left > 0) text += ` · about ${duration(left / rate)} left`;
  }
  return text;
}

// Start following when the page sees work; stops by itself once the base is idle.
export async function followChunks(baseId, embeds) {
  if (polling || !baseId) return;
  polling = true;
  const line = document.getElementById("progress-chunks");
  let mark = null; // {t, done}: the first answer with chunks done
  try {
    for (;;) {
      const p = await api(`/bases/${enc(baseId)}/progress`);
      if (!p.busy) break;
      const now = Date.now() / 1000;
      if (!mark && p.chunks_done > 0) mark = { t: now, done: p.chunks_done };
      const rate = mark && now > mark.t ? (p.chunks_done - mark.done) / (now - mark.t) : 0;
      line.textContent = chunkText(p, embeds, rate);
      line.hidden = false;
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  } catch {
    // progress in chunks is extra: the files' counts above still move
  } finally {
    polling = false;
    line.hidden = true;
  }
}
