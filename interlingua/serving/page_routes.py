"""The web page at `/`: translate into every target language, look inside the bridge, compare
sentences across languages, in a browser.

The page is plain HTML, CSS and a small vanilla script shipped in the package (`serving/page/`):
no build step, and nothing is fetched from elsewhere at run time (the Content-Security-Policy
allows this origin only), so it works on a machine without internet. Everything it shows comes
from the JSON endpoints any client can call (GET /languages, /directions, /model; POST
/translate, /attention, /similarity), so the page holds no model logic of its own.
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


def install_page(app: FastAPI) -> None:
    """GET / (the page) and GET /page/<file> (its script and style sheet)."""
    app.mount("/page", StaticFiles(packages=[("interlingua.serving", "page")]), name="page")

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> HTMLResponse:
        # Read per request: the file is small, and an edited page shows on reload.
        return HTMLResponse((PAGE_DIR / "index.html").read_text(encoding="utf-8"),
                            headers={"Content-Security-Policy": CONTENT_SECURITY_POLICY,
                                     "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"})
