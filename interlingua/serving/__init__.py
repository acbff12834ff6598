"""`interlingua serve`: the library API (`interlingua.load` -> `Model`) over HTTP.

Layer: above inference and evaluation (it reuses the restricted language identifier of
`data.language_id` and evaluation's `cosine_matrix`), below the CLI. One module a job:

- `limits.py`       what one request may ask for (texts per request, characters per text) and the
                    batcher's settings; the checks that name the offending field
- `batcher.py`      dynamic batching: concurrent requests that can share one model call become one,
                    run in a single worker thread off the event loop
- `model_calls.py`  the shareable model calls (translate, encode, attention) as hashable batch keys
- `schemas.py`      the request and response bodies (pydantic; they are the OpenAPI docs at /docs)
- `error_responses.py` every error as `{"error": {"message", "field"}}` with a 4xx status (500 for bugs only)
- `app.py`          `build_app(model, limits)`: the FastAPI application and its endpoints
- `page_routes.py`  the web page at `/` (`page/`: HTML, CSS, vanilla JS), a client of those endpoints
- `server.py`       `serve(...)`: load once, listen, stop gracefully on SIGTERM / Ctrl-C
"""
