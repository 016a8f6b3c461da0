"""The REST API's interactive docs at `/docs`, served whole by the daemon: no CDN.

FastAPI's own `/docs` page loads Swagger UI from cdn.jsdelivr.net, so on a node without
internet it is blank. This router serves the same page (FastAPI's `get_swagger_ui_html`,
its documented recipe for self-hosted assets) with Swagger UI's JavaScript and CSS from
the `swagger-ui-bundle-v2` package, a dependency: Swagger UI 5, the first major version
that reads OpenAPI 3.1, which FastAPI writes. ReDoc has no such package, so `/redoc` is off.
"""

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, Response
from swagger_ui_bundle import swagger_ui_path

ASSETS_URL = "/docs/assets"
SWAGGER_UI = Path(str(swagger_ui_path))
_FILES = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "favicon-32x32.png": "image/png",
}

router = APIRouter(include_in_schema=False)


@router.get("/docs")
async def docs(request: Request) -> HTMLResponse:
    """Swagger UI over this daemon's OpenAPI, every asset from this daemon."""
    root = request.scope.get("root_path", "")
    return get_swagger_ui_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title}: REST API",
        swagger_js_url=f"{root}{ASSETS_URL}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{ASSETS_URL}/swagger-ui.css",
        swagger_favicon_url=f"{root}{ASSETS_URL}/favicon-32x32.png",
    )


@router.get(ASSETS_URL + "/{name}")
async def asset(name: str) -> Response:
    media_type = _FILES.get(name)
    if media_type is None:
        return Response("no such asset", status_code=404, media_type="text/plain")
    return FileResponse(
        SWAGGER_UI / name, media_type=media_type, headers={"Cache-Control": "max-age=3600"}
    )
