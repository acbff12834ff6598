"""The web page at `/`: translate into every target language, look inside the bridge, compare
sentences across languages, in a browser.

The page is plain HTML, CSS and a small vanilla script shipped in the package (`serving/page/`):
no build step, and nothing is fetched from elsewhere at run time (the Content-Security-Policy
allows this origin only), so it works on a machine without internet. Everything it shows comes
from the JSON endpoints any client can call (GET /languages, /directions, /model; POST
/translate, /attention, /similarity), so the page holds no model logic of its own. With an API key
the page asks for the key when the service answers 401 and sends it with every call.

The API docs at /docs are the same kind of page (`docs.html`, `docs.js`): the service's own
/openapi.json drawn as HTML. FastAPI's Swagger UI and ReDoc load their scripts from a CDN (no
package on PyPI ships them in a well-kept form), which a machine without internet cannot reach
and which would let a third party's script run beside the API key; so they are off.
"""
from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

PAGE_DIR = files("interlingua.serving") / "page"
"""index.html, page.js, page.css (package data: pyproject.toml `[tool.setuptools.package-data]`)."""

CONTENT_SECURITY_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                           "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
                           "frame-ancestors 'none'")


def _html(name: str) -> HTMLResponse:
    # Read per request: the file is small, and an edited page shows on reload.
    return HTMLResponse((PAGE_DIR / name).read_text(encoding="utf-8"),
                        headers={"Content-Security-Policy": CONTENT_SECURITY_POLICY,
                                 "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"})


def install_page(app: FastAPI) -> None:
    """GET / (the page), GET /docs (the API docs) and GET /page/<file> (their scripts and style sheet)."""
    app.mount("/page", StaticFiles(packages=[("interlingua.serving", "page")]), name="page")

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> HTMLResponse:
        return _html("index.html")

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    async def docs() -> HTMLResponse:
        return _html("docs.html")
