"""What FastAPI cannot infer for ``/openapi.json``: the Dify routes' body (read by hand, after
the key check) and who guards which route.

- ``HTTPBearer`` (``KNOWBASE_API_TOKEN`` or a scoped key) on every route; optional (an empty
  requirement beside it) on a server without a token, which stays open until a key exists;
- ``DifyKey`` (one of ``KNOWBASE_EXTERNAL_API_KEYS``) on the retrieval routes alone, which the
  server's token does not guard (and so never answer 401).

A client generated from the document then sends the right header to the right route and reads
each error in the shape the route really answers.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

DIFY_SCHEME = {
    "type": "http",
    "scheme": "bearer",
    "description": "one of KNOWBASE_EXTERNAL_API_KEYS (Dify's external knowledge API key)",
}
TOKEN_DESCRIPTION = "KNOWBASE_API_TOKEN (kb serve's token)"


def install(app: FastAPI, *, dify: bool, token: bool = True) -> None:
    """Replace ``app.openapi`` by one that completes FastAPI's document once, then caches it.
    ``token``: the server has an admin token (else bearer auth is declared optional)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        doc = generate()
        if not token:
            _bearer_optional(doc)
        if dify:
            _add_dify(doc)
        app.openapi_schema = doc
        return doc

    app.openapi = openapi  # type: ignore[method-assign]


def _bearer_optional(doc: dict[str, Any]) -> None:
    """No token: requests without one are answered (until ``kb keys create`` makes the first
    key), so each route's bearer requirement gets an empty alternative, and no 401 promise."""
    for methods in doc.get("paths", {}).values():
        for operation in methods.values():
            security = operation.get("security")
            if security and {} not in security:
                security.append({})


def _add_dify(doc: dict[str, Any]) -> None:
    from knowbase.interfaces.http.external import RETRIEVAL_PATHS, SCHEMA_MODELS

    components = doc.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for model in SCHEMA_MODELS:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    schemes = components.setdefault("securitySchemes", {})
    if "HTTPBearer" in schemes:
        schemes["HTTPBearer"]["description"] = TOKEN_DESCRIPTION
    schemes["DifyKey"] = DIFY_SCHEME
    for path in RETRIEVAL_PATHS:
        operation = doc["paths"][path]["post"]
        operation["security"] = [{"DifyKey": []}]
        operation["responses"].pop("401", None)  # the server's token does not apply here
