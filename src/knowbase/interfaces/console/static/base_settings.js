// The base page's settings card: patch settings, enable or switch the embedding model,
// restore into a new base.
import { api, enc, notify, showError } from "./common.js";

const NUMBERS = ["chunk_size", "chunk_overlap", "document_count", "threshold"];

export function fillSettings(base) {
  const form = document.getElementById("settings-form");
  for (const name of [...NUMBERS, "rerank_model_id", "file_processor_id"]) {
    form.elements[name].value = base[name] ?? "";
  }
  const button = document.getElementById("embedding-button");
  button.textContent = base.embedding_model_id ? "Switch embedding model" : "Enable embedding";
  document.getElementById("set-embedding").value = base.embedding_model_id || "";
}

export function wireSettings(baseId, reload) {
  document.getElementById("settings-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const f = e.target.elements;
    const patch = {};
    for (const name of NUMBERS) {
      if (f[name].value !== "") patch[name] = Number(f[name].value);
      else if (name === "threshold" || name === "document_count") patch[name] = null;
    }
    patch.rerank_model_id = f.rerank_model_id.value.trim() || null;
    patch.file_processor_id = f.file_processor_id.value || null;
    try {
      fillSettings(await api(`/bases/${enc(baseId)}`, { method: "PATCH", json: patch }));
      notify("Settings saved.", false);
    } catch (err) {
      showError(err);
    }
  });
  document.getElementById("embedding-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const model = document.getElementById("set-embedding").value.trim();
    try {
      const base = await api(`/bases/${enc(baseId)}/enable-embedding`,
        { method: "POST", json: { embedding_model_id: model } });
      fillSettings(base);
      notify(`Embedding with ${model}: the items are being reindexed.`, false);
      await reload();
    } catch (err) {
      showError(err);
    }
  });
  document.getElementById("restore-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const name = document.getElementById("restore-name").value.trim();
    try {
      const out = await api(`/bases/${enc(baseId)}/restore`, { method: "POST", json: { name } });
      const missing = out.skipped_missing_source_count;
      notify(`Restored into ${out.base.name}` + (missing ? ` (${missing} missing source(s))` : "")
        + ".", false);
      e.target.reset();
    } catch (err) {
      showError(err);
    }
  });
}
