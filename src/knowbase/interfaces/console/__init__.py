"""The web console that ``kb serve`` shows at ``/``: server-rendered pages over the HTTP API.

    app.include_router(console.router)   # in create_app, after the API routers

Pages are Jinja2 templates that hold layout, labels and forms only; the data comes from the API
through small hand-written scripts in ``console/static`` (no build step, nothing vendored). The
pages are plain Starlette routes, so FastAPI's app-wide bearer-token dependency does not cover
them: a page holds no data, and each script asks for the token once per tab (kept in
``sessionStorage``, sent as ``Authorization: Bearer``, never in a URL) when the API answers 401.
A strict Content-Security-Policy allows only this server's own scripts and styles.

Routes: ``/`` bases; ``/console/bases/{base}`` one base; ``/console/search`` search;
``/console/view`` the document viewer; ``/docs`` the API's routes (from its OpenAPI schema, no
CDN); ``/console/static/{name}`` scripts and styles.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from knowbase.interfaces.console import api as console_api
from knowbase.interfaces.console.settings_form import form_fields
from knowbase.interfaces.http.common import error_response

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=str(HERE / "templates"))
STATIC = {p.name: p for p in (HERE / "static").iterdir() if p.suffix in (".js", ".css")}
MEDIA_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _page(request: Request, template: str, **context: object) -> Response:
    return templates.TemplateResponse(
        request,
        template,
        {"page": template.removesuffix(".html"), **context},
        headers=SECURITY_HEADERS,
    )


async def bases_page(request: Request) -> Response:
    return _page(request, "bases.html", title="Bases")


#: The base page's settings form: one field per mutable setting of the declaration.
SETTINGS_FORM = form_fields()


async def base_page(request: Request) -> Response:
    base = request.path_params["base"]
    return _page(request, "base.html", title=base, base=base, settings_form=SETTINGS_FORM)


async def search_page(request: Request) -> Response:
    return _page(request, "search.html", title="Search", base=request.query_params.get("base", ""))


async def view_page(request: Request) -> Response:
    return _page(request, "view.html", title="Document")


async def api_page(request: Request) -> Response:
    """``/docs``: the API's routes from its OpenAPI schema, rendered here (FastAPI's own page
    loads Swagger UI from a CDN: blank offline)."""
    schema = request.app.openapi()
    groups: dict[str, list[dict[str, object]]] = {}
    for path, methods in schema.get("paths", {}).items():
        for method, op in methods.items():
            params = [p["name"] for p in op.get("parameters", [])]
            body = op.get("requestBody", {}).get("content", {})
            if body:
                params.append("body: " + ", ".join(sorted(body)))
            description = (op.get("description") or "").strip().split("\n\n")[0]
            groups.setdefault((op.get("tags") or ["other"])[0], []).append(
                {
                    "id": op.get("operationId", f"{method}-{path}"),
                    "method": method.upper(),
                    "path": path,
                    "summary": op.get("summary", ""),
                    "description": description,
                    "params": params,
                }
            )
    return _page(
        request, "api.html", title="API", info=schema.get("info", {}), groups=sorted(groups.items())
    )


async def static_file(request: Request) -> Response:
    path = STATIC.get(request.path_params["name"])
    if path is None:
        return error_response(404, "not_found", "no such console file")
    return FileResponse(
        path,
        media_type=MEDIA_TYPES[path.suffix],
        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
    )


router = APIRouter(
    routes=[
        Route("/", bases_page, methods=["GET"], include_in_schema=False),
        Route("/console/bases/{base}", base_page, methods=["GET"], include_in_schema=False),
        Route("/console/search", search_page, methods=["GET"], include_in_schema=False),
        Route("/console/view", view_page, methods=["GET"], include_in_schema=False),
        Route("/docs", api_page, methods=["GET"], include_in_schema=False),
        Route("/console/static/{name}", static_file, methods=["GET"], include_in_schema=False),
    ]
)
router.include_router(console_api.router)

__all__ = ["router"]
