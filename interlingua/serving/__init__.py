"""`interlingua serve`: the library API (`interlingua.load` -> `Model`) over HTTP.

Layer: above inference and evaluation (it reuses the restricted language identifier of
`data.language_id` and evaluation's `cosine_matrix`), below the CLI. One module a job:

- `limits.py`       what one request may ask for (texts, characters, body bytes), what the service takes
                    on at once, the batcher's settings; the checks that name the offending field
- `batcher.py`      dynamic batching: concurrent requests that can share one model call become one (bounded
                    by texts and tokens), run in a single worker thread off the event loop; a failing
                    shared call is retried per request, so only the request at fault fails
- `model_calls.py`  the shareable model calls (translate, encode, attention) as hashable batch keys
- `schemas.py`      the request and response bodies (pydantic; they are the OpenAPI description)
- `error_responses.py` every error as `{"error": {"message", "field"}}` with a 4xx status (500 for bugs only)
- `request_body.py` ASGI: the payload limit before the body is read (413), a stalled body (408)
- `admission.py`    ASGI: at most --max-concurrent-requests model requests at once (429)
- `auth.py`         ASGI: the optional API key (401)
- `timing.py`       ASGI: timing headers on model answers, every request into the metrics
- `metrics.py`      the Prometheus metrics at /metrics (a registry per app)
- `connections.py`  uvicorn's HTTP protocol with a deadline for a request's head and a connection cap
- `app.py`          `build_app(model, limits)`: the FastAPI application, its endpoints and middleware
- `page_routes.py`  the web page at `/` and the API docs at `/docs` (`page/`: HTML, CSS, vanilla JS),
                    clients of those endpoints, nothing loaded from elsewhere
- `server.py`       `serve(...)`: load once, listen, stop gracefully on SIGTERM / Ctrl-C
"""
