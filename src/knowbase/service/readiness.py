"""Readiness: is each component of a home usable right now, and if not, why (``kb status``,
``GET /status``), and which embedding models a base can be given here
(:func:`offered_embedding_models`, the console's ``GET /embedding-models``).

    >>> report = readiness(kb)                                  # doctest: +SKIP
    >>> report["status"], [c["component"] for c in report["components"]]
    ('degraded', ['catalog', 'index', 'embedding', 'rerank', 'file_processor', 'workers'])

Each component is ``ready``, ``degraded`` (works, but something the user expects will not happen)
or ``unavailable`` (calls that need it fail), with a reason a person can act on. The overall
status is ``unavailable`` when the catalog is, ``degraded`` when any component is not ready,
else ``ready``. Checks are cheap: no model weights are loaded, HTTP endpoints get one short
request, an index is mounted (as a search would) and read once. The report is plain JSON.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from knowbase.catalog.models import Base
from knowbase.errors import KnowbaseError

if TYPE_CHECKING:
    from knowbase.service import Knowledge

READY, DEGRADED, UNAVAILABLE = "ready", "degraded", "unavailable"
PROBE_TIMEOUT_S = 1.5


def _component(
    name: str, status: str, reason: str, base: Base | None = None, **details: Any
) -> dict[str, Any]:
    out: dict[str, Any] = {"component": name, "status": status, "reason": reason}
    if base is not None:
        out["base_id"], out["base_name"] = base.id, base.name
    out["details"] = details
    return out


def _reason(exc: BaseException) -> str:
    if isinstance(exc, KnowbaseError):
        return f"{exc.code}: {exc.message}" + (f"; {exc.hint}" if exc.hint else "")
    return f"{type(exc).__name__}: {exc}"


def check_catalog(kb: Knowledge) -> tuple[dict[str, Any], list[Base]]:
    """The catalog answers a query; returns the bases too (None of them when it does not)."""
    try:
        kb.check_catalog()
        bases = kb.list_bases()
    except Exception as exc:  # any driver error means the whole home is unusable
        return _component("catalog", UNAVAILABLE, _reason(exc)), []
    url = kb.settings.catalog_url
    backend = url.split(":", 1)[0]
    return _component("catalog", READY, f"{backend} catalog, {len(bases)} base(s)"), bases


def check_index(kb: Knowledge, base: Base) -> dict[str, Any]:
    """Mount the base's index as a search would (a failed mount fails the base) and read it."""
    if base.status == "failed":
        return _component(
            "index",
            UNAVAILABLE,
            f"base is failed ({base.error}); rebuild it from its stored copies: "
            f"kb base restore {base.name!r} NEW_NAME",
            base,
        )
    try:
        store = kb.rt.store(base)
        version = store.changes_version()
        lane = vector_lane(store)
    except Exception as exc:
        return _component("index", UNAVAILABLE, _reason(exc), base)
    extra = {"vector_lane": lane} if lane else {}
    return _component(
        "index",
        READY,
        f"{base.index_backend} index mounted",
        base,
        changes_version=version,
        **extra,
    )


def vector_lane(store: Any) -> dict[str, Any] | None:
    """The vector lane a search of this store uses and its memory, where the backend says
    (the sqlite backend: ``exact`` or ``quantized-…``, index/vector/quantized.py)."""
    info = getattr(store, "vector_lane_info", None)
    return info() if info is not None else None


def base_vector_lane(kb: Knowledge, base: Base) -> dict[str, Any] | None:
    """:func:`vector_lane` of a base (``kb status BASE``); None for a BM25-only base."""
    if not base.dimensions or base.status == "failed":
        return None
    try:
        return vector_lane(kb.rt.store(base))
    except KnowbaseError as exc:
        return {"lane": "unavailable", "reason": _reason(exc)}


def lane_line(lane: dict[str, Any]) -> str:
    """One line for people: ``vector lane: exact, 12000 rows, 17.6 MB (estimated)``."""
    if "rows" not in lane:
        return f"vector lane: {lane['lane']}" + (f" ({lane['reason']})" if "reason" in lane else "")
    mb = lane.get("matrix_bytes", 0) / 1e6
    memory = f"{mb:.1f} MB matrix"
    if "index_bytes" in lane:
        memory += f" + {lane['index_bytes'] / 1e6:.1f} MB index"
    note = "" if lane.get("loaded") else " (estimated, not loaded in this process)"
    reason = f" — {lane['reason']}" if "reason" in lane else ""
    return f"vector lane: {lane['lane']}, {lane['rows']} rows, {memory}{note}{reason}"


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def check_local_model(model: str) -> tuple[str, str]:
    """The ``local`` extra's imports and packaged files, without importing torch or loading."""
    from knowbase.providers import multilingual
    from knowbase.providers.local import INT8_NAME, NAMES, model_path

    if model.lower() == multilingual.MODEL_NAME:
        return multilingual.readiness_check()
    if model.lower() not in NAMES:
        known = ", ".join(repr(n) for n in (*NAMES, multilingual.MODEL_NAME))
        return UNAVAILABLE, f"the local profile has {known}"
    missing = [m for m in ("onnxruntime", "tokenizers") if not _has(m)]
    if missing:
        return UNAVAILABLE, f"missing {', '.join(missing)}: pip install 'knowbase[local]'"
    try:
        path = model_path()
    except KnowbaseError as exc:
        return UNAVAILABLE, _reason(exc)
    from importlib.metadata import version

    from knowbase.providers import minilm_onnx

    try:
        folder = minilm_onnx.export_dir(path, version("onnxruntime"))
    except (KnowbaseError, ValueError, ImportError) as exc:  # metadata of a broken install
        return UNAVAILABLE, f"cannot locate the local model's ONNX export: {exc}"
    if model.lower() == INT8_NAME:
        from knowbase.providers.minilm_int8 import quantized_dir

        if (quantized_dir(folder) / minilm_onnx.INFO_FILE).is_file():
            return READY, f"local model files at {path}, int8 graph at {quantized_dir(folder)}"
        if not _has("onnx"):
            return UNAVAILABLE, "the int8 graph is made on first use and needs onnx: " + (
                "pip install 'knowbase[local]'"
            )
    elif (folder / minilm_onnx.INFO_FILE).is_file():
        return READY, f"local model files at {path}, ONNX graph at {folder}"
    exporters = [m for m in ("torch", "transformers", "onnx") if not _has(m)]
    if exporters:
        return UNAVAILABLE, (
            f"the local model is not exported to ONNX yet and the export needs "
            f"{', '.join(exporters)}: pip install 'knowbase[local]'"
        )
    return READY, f"local model files at {path} (exported to ONNX on first use, once)"


def offered_embedding_models(kb: Knowledge) -> list[dict[str, Any]]:
    """The built-in local models with whether they can run here (readiness's own check: the
    extra's imports and files, nothing loaded), each configured remote profile as a prefix to
    complete with a model name (not probed: a remote model is checked when it is first used),
    and the ``hash:`` test model only when test providers are on."""
    from knowbase.providers import local, multilingual
    from knowbase.providers.registry import BUILTIN_EMBEDDING_PROFILES

    out: list[dict[str, Any]] = []
    for name in (*local.NAMES, multilingual.MODEL_NAME):
        status, reason = check_local_model(name)
        out.append(
            {"id": f"local:{name}", "kind": "model", "available": status == READY, "reason": reason}
        )
    if kb.settings.test_providers:
        out.append(
            {"id": "hash:d64", "kind": "model", "available": True, "reason": "test provider"}
        )
    for name, profile in sorted(kb.settings.providers.items()):
        if name in BUILTIN_EMBEDDING_PROFILES:
            continue  # the built-in profile of that name wins (providers/registry.py)
        out.append(
            {
                "id": f"{name}:",
                "kind": "profile",
                "available": True,
                "reason": f"remote profile at {profile.base_url}: add the model name",
            }
        )
    return out


def _reach(url: str, cache: dict[str, tuple[str, str]]) -> tuple[str, str]:
    """One short GET: any HTTP answer (even 401/404) means the endpoint is up."""
    if url in cache:
        return cache[url]
    import httpx

    try:
        response = httpx.get(url, timeout=PROBE_TIMEOUT_S, follow_redirects=False)
        result = READY, f"{urlsplit(url).netloc} answered HTTP {response.status_code}"
    except httpx.HTTPError as exc:
        result = UNAVAILABLE, f"{url} is unreachable ({type(exc).__name__}: {exc})"
    except Exception as exc:  # a malformed base_url in config.toml
        result = UNAVAILABLE, f"{url}: {_reason(exc)}"
    cache[url] = result
    return result


def _check_model(
    kb: Knowledge, model_id: str, builtin: tuple[str, ...], cache: dict[str, tuple[str, str]]
) -> tuple[str, str]:
    from knowbase.providers.registry import parse_model_id

    try:
        profile_name, model = parse_model_id(model_id)
    except KnowbaseError as exc:
        return UNAVAILABLE, _reason(exc)
    if profile_name == "local" and "local" in builtin:
        return check_local_model(model)
    if profile_name == "hash" and "hash" in builtin and kb.settings.test_providers:
        return READY, "deterministic test provider"
    profile = kb.settings.providers.get(profile_name)
    if profile is None:
        return UNAVAILABLE, f"unknown provider profile {profile_name!r}; add it to config.toml"
    status, reason = _reach(profile.base_url, cache)
    if status == READY and profile.api_key_env and not profile.api_key():
        return DEGRADED, f"{reason}, but ${profile.api_key_env} is not set"
    return status, reason


def check_embedding(kb: Knowledge, base: Base, cache: dict[str, tuple[str, str]]) -> dict:
    if not base.embedding_model_id:
        return _component("embedding", READY, "BM25-only base (no embedding model)", base)
    status, reason = _check_model(kb, base.embedding_model_id, ("local", "hash"), cache)
    return _component("embedding", status, reason, base, model_id=base.embedding_model_id)


def check_rerank(kb: Knowledge, base: Base, cache: dict[str, tuple[str, str]]) -> dict:
    if not base.rerank_model_id:
        return _component("rerank", READY, "no rerank model", base)
    status, reason = _check_model(kb, base.rerank_model_id, ("hash",), cache)
    return _component("rerank", status, reason, base, model_id=base.rerank_model_id)


def check_file_processor(bases: list[Base]) -> dict[str, Any]:
    from knowbase.pipeline.processing import tesseract_available

    users = sorted(b.name for b in bases if b.file_processor_id == "tesseract")
    if tesseract_available():
        return _component(
            "file_processor",
            READY,
            "tesseract found: new bases OCR images and scanned pages",
            bases=users,
        )
    if users:
        return _component(
            "file_processor",
            DEGRADED,
            "tesseract is not installed but bases use it: images and scanned PDFs will fail "
            "no_text_extracted (apt install tesseract-ocr)",
            bases=users,
        )
    return _component("file_processor", READY, "no OCR (tesseract not installed)", bases=users)


def check_workers(kb: Knowledge) -> dict[str, Any]:
    """Live workers (any process, any host) and whether queued jobs have one to run them."""
    try:
        workers = [w.to_dict() for w in kb.activity.list_workers()]
        pending = kb.activity.count_jobs(statuses=["pending"])
    except Exception as exc:
        return _component("workers", UNAVAILABLE, _reason(exc))
    if workers:
        hosts = sorted({w["host"] for w in workers})
        held = sum(w["jobs_held"] for w in workers)
        return _component(
            "workers",
            READY,
            f"{len(workers)} live worker(s) on {', '.join(hosts)}, holding {held} job(s)",
            workers=workers,
            pending=pending,
        )
    if pending:
        return _component(
            "workers",
            DEGRADED,
            "queued, no worker running: start kb serve or kb worker",
            workers=[],
            pending=pending,
        )
    return _component("workers", READY, "no worker running; nothing queued", workers=[], pending=0)


def overall(components: list[dict[str, Any]]) -> str:
    """``unavailable`` iff the catalog is; ``degraded`` when anything else is not ready."""
    if any(c["component"] == "catalog" and c["status"] == UNAVAILABLE for c in components):
        return UNAVAILABLE
    if any(c["status"] != READY for c in components):
        return DEGRADED
    return READY


def readiness(kb: Knowledge) -> dict[str, Any]:
    """Per-component readiness of the home and an overall ``status`` (JSON-friendly)."""
    catalog, bases = check_catalog(kb)
    components = [catalog]
    if catalog["status"] != UNAVAILABLE:
        cache: dict[str, tuple[str, str]] = {}
        for base in bases:
            components.append(check_index(kb, base))
            components.append(check_embedding(kb, base, cache))
            components.append(check_rerank(kb, base, cache))
        components.append(check_file_processor(bases))
    components.append(check_workers(kb))  # unavailable too when the catalog is
    return {"status": overall(components), "components": components}


__all__ = [
    "DEGRADED",
    "READY",
    "UNAVAILABLE",
    "base_vector_lane",
    "lane_line",
    "offered_embedding_models",
    "readiness",
    "vector_lane",
]
