"""`build_app(model, limits)`: the FastAPI application over one loaded `Model`.

The handlers only check the request (limits, languages: before anything is queued, so every
bad request is a cheap 4xx naming its field), hand the texts to the dynamic batcher and shape
the answer; translation, embedding and attention are the library's (`Model.translate`; into several
targets `Model.represent` once, then `Model.generate` per target; `Model.encode`, `Model.attention_maps`;
similarities `evaluation.cosine.cosine_matrix`), so the
service answers exactly what the Python API and the CLI do. The web page at `/` (`page_routes.py`)
is a client of these endpoints like any other.

Around the endpoints, pure ASGI middleware, outermost first (each acts before the body is read):
`timing.Measured` (timing headers, /metrics), `auth.ApiKey` (401), `admission.AdmissionLimit` (429),
`request_body.BodyGuard` (413, 408).
"""
from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import numpy as np
from fastapi import Depends, FastAPI, Request
from fastapi.responses import Response

from interlingua.data.language_id import identify, supported
from interlingua.errors import InterlinguaError, LanguageError
from interlingua.evaluation.cosine import cosine_matrix
from interlingua.inference.api import AttentionMaps, Model
from interlingua.serving.admission import RETRY_AFTER_S, AdmissionLimit, InFlight
from interlingua.serving.auth import ApiKey, check_api_key
from interlingua.serving.batcher import BatcherClosed, DynamicBatcher
from interlingua.serving.error_responses import RequestFieldError, install_error_handlers
from interlingua.serving.limits import ServiceLimits, check_texts, check_written, estimated_subwords
from interlingua.serving.metrics import CONTENT_TYPE, ServiceMetrics
from interlingua.serving.model_calls import (
    AttentionCall,
    EncodeCall,
    EncodedText,
    ModelCall,
    TranslateCall,
    TranslateTargetsCall,
    run_model_call,
)
from interlingua.serving.page_routes import install_page
from interlingua.serving.request_body import BodyGuard
from interlingua.serving.schemas import (
    AttentionRequest,
    AttentionResponse,
    DirectionInfo,
    DirectionsResponse,
    EmbeddingObject,
    EmbedRequest,
    EmbedResponse,
    ErrorResponse,
    HealthResponse,
    LanguagesResponse,
    ModelInfoResponse,
    OpenAIEmbeddingRequest,
    OpenAIEmbeddingResponse,
    PivotTranslations,
    SimilarityRequest,
    SimilarityResponse,
    TranslateRequest,
    TranslateResponse,
    TranslateTargetsResponse,
    TranslationRoute,
    Usage,
)
from interlingua.serving.timing import Measured, request_timing

log = logging.getLogger(__name__)

MODEL_PATHS = ("/translate", "/embed", "/v1/embeddings", "/attention", "/similarity")
"""The POST endpoints that queue model work: bounded by --max-concurrent-requests, timed in headers."""

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "The body is not valid JSON."},
    401: {"model": ErrorResponse, "description": "The service has an API key and the request did not send it as "
                                                 "`Authorization: Bearer KEY`."},
    408: {"model": ErrorResponse, "description": "The body stalled for --read-timeout seconds."},
    413: {"model": ErrorResponse, "description": "The body is over --payload-limit bytes."},
    415: {"model": ErrorResponse, "description": "The body is not sent as application/json."},
    422: {"model": ErrorResponse, "description": "A field is missing, of the wrong type, over a limit, not valid "
                                                 "Unicode, or names a language the model does not have; `field` "
                                                 "says which."},
    429: {"model": ErrorResponse, "description": "--max-concurrent-requests requests are being answered; retry "
                                                 "after Retry-After seconds."},
    503: {"model": ErrorResponse, "description": "No answer within --request-timeout seconds (overloaded; see "
                                                 "Retry-After), or the service is shutting down."},
}


def _package_version() -> str:
    try:
        return version("interlingua")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree that was never installed
        return "unknown"


async def require_json(request: Request) -> None:
    """POST bodies must be JSON: anything else (a form post from a bare `curl -d`) is a 415 that says
    which header to send, rather than a confusing complaint about the body's fields."""
    value = request.headers.get("content-type", "")
    media = value.split(";", 1)[0].strip().lower()
    if media != "application/json" and not (media.startswith("application/") and media.endswith("+json")):
        raise RequestFieldError("header.content-type", "send the body as JSON with the header Content-Type: "
                                f"application/json (got {value or 'no Content-Type'})", status=415)


class _LanguageCheck:
    """Which languages the model reads and writes: `Model.check_source` / `check_target`, their
    `LanguageError` answered as a 422 naming the request's field."""

    def __init__(self, model: Model):
        self.model = model
        self.languages = model.languages

    def source(self, lang: str, field: str) -> None:
        try:
            self.model.check_source(lang)
        except LanguageError as err:
            raise RequestFieldError(field, str(err)) from None

    def target(self, lang: str, field: str) -> None:
        try:
            self.model.check_target(lang)
        except LanguageError as err:
            raise RequestFieldError(field, str(err)) from None

    def targets(self, tgt: str | None, tgts: list[str] | None) -> list[str]:
        """The request's targets: `tgt` alone, or the list `tgts` (not empty, each known, none twice)."""
        if (tgt is None) == (tgts is None):
            raise RequestFieldError("body.tgts" if tgts is not None else "body.tgt",
                                    "give either `tgt` (one target language) or `tgts` (a list of them)"
                                    + (", not both" if tgts is not None else ""))
        if tgts is None:
            assert tgt is not None  # exactly one of tgt, tgts (checked above)
            self.target(tgt, "body.tgt")
            return [tgt]
        if not tgts:
            raise RequestFieldError("body.tgts", "the list of target languages is empty; send at least one")
        for index, lang in enumerate(tgts):
            self.target(lang, f"body.tgts.{index}")
            if lang in tgts[:index]:
                raise RequestFieldError(f"body.tgts.{index}", f"target language '{lang}' is in `tgts` twice")
        return tgts

    def route(self, call: TranslateCall) -> TranslationRoute:
        return "pivot" if call.pivot is not None else self.languages.route(call.src, call.tgt)


class _AttentionCheck:
    """What attention the model can show (`Model.check_attention`), and which encoder layer's
    self-attention a request may ask for (`body.layer`)."""

    def __init__(self, model: Model):
        self.model = model
        self.bridge = model.bridge_attention
        self.layers = model.self_attention_layers
        kinds = model.kinds
        self.kinds = f"bridge: {kinds.bridge}, encoder: {kinds.encoder}"

    def layer(self, layer: int | None) -> int | None:
        """The self-attention layer to answer with (default the last), None for an encoder without one."""
        try:
            self.model.check_attention()
        except InterlinguaError as err:
            raise RequestFieldError(None, str(err)) from None
        if layer is None:
            return self.layers or None
        if not self.layers:
            raise RequestFieldError("body.layer", f"this model's encoder has no self-attention ({self.kinds}); "
                                                  "leave out `layer` (the bridge's attention comes without it)")
        if layer > self.layers:
            raise RequestFieldError("body.layer", f"layer {layer}: the encoder has {self.layers} layers with "
                                                  f"self-attention (1 to {self.layers})")
        return layer


class _LanguageGuess:
    """Each text's language for /v1/embeddings requests without `language`: langid.py restricted to
    the model's source languages (a text is embedded by one of them or not at all)."""

    def __init__(self, sources: Sequence[str]):
        self.sources = tuple(sources)
        self.available = len(self.sources) == 1 or supported(self.sources)
        if self.available and len(self.sources) > 1:
            identify([], self.sources)  # builds (and caches) the identifier now rather than on the first request

    async def __call__(self, texts: list[str]) -> list[str]:
        if len(self.sources) == 1:
            return [self.sources[0]] * len(texts)
        if not self.available:
            raise RequestFieldError("body.language", "this model has a language the identifier does not know "
                                                     f"({', '.join(self.sources)}): give `language`")
        found = await asyncio.to_thread(identify, texts, self.sources)  # off the event loop; not a model call
        known = Counter(lang for lang in found if lang is not None)
        # An empty text has no language; it becomes zeros whichever encoder reads it, so it joins the
        # request's commonest language and costs no extra model call.
        fallback = known.most_common(1)[0][0] if known else self.sources[0]
        return [lang or fallback for lang in found]


def _batcher(request: Request) -> DynamicBatcher[ModelCall, Any]:
    batcher = getattr(request.app.state, "batcher", None)
    if batcher is None:
        raise RuntimeError("the app's lifespan has not run (use `with TestClient(app)`, or serve it with uvicorn)")
    return batcher


async def _submit(request: Request, call: ModelCall, texts: list[str]) -> list[Any]:
    """The model's results for `texts`, within what is left of the request's --request-timeout (a request
    that runs out leaves the queue: 503). A library error that the texts caused is the client's (422)."""
    limits: ServiceLimits = request.app.state.limits
    timing = request_timing(request)
    submitted = time.perf_counter()
    try:
        answer = await asyncio.wait_for(_batcher(request).answer(call, texts),
                                        max(0.0, timing.left_s(limits.request_timeout_s)))
    except BatcherClosed as err:
        raise RequestFieldError(None, str(err), status=503) from None
    except asyncio.TimeoutError:
        raise RequestFieldError(None, f"no answer within {limits.request_timeout_s:g} s (--request-timeout): the "
                                      f"service is overloaded; retry in {RETRY_AFTER_S} s", status=503,
                                headers={"Retry-After": str(RETRY_AFTER_S)}) from None
    except (InterlinguaError, ValueError) as err:
        log.warning("the model refused a request's texts (%s: %s): answered 422", type(err).__name__, err)
        raise RequestFieldError(None, str(err)) from None
    timing.model_call(submitted, time.perf_counter(), answer.model_s)
    return answer.results


async def _encode_each(request: Request, texts: list[str], langs: list[str], count_tokens: bool = False
                       ) -> list[EncodedText]:
    """Each text's mean-pooled vector from its own language's encoder: one shared model call per language."""
    groups: dict[str, list[int]] = {}
    for index, lang in enumerate(langs):
        groups.setdefault(lang, []).append(index)
    answers = await asyncio.gather(*(_submit(request, EncodeCall(lang, "mean", count_tokens=count_tokens),
                                             [texts[i] for i in indices]) for lang, indices in groups.items()))
    encoded: list[EncodedText | None] = [None] * len(texts)
    for indices, answer in zip(groups.values(), answers):
        for index, item in zip(indices, answer):
            encoded[index] = item
    return encoded  # type: ignore[return-value]  # every index belongs to one group


def _translated(call: TranslateCall, translations: list[str], check: _LanguageCheck,
                truncated: list[int]) -> TranslateResponse:
    """One target's answer: what a request with that `tgt` gets (`truncated` only where some text was cut)."""
    route = check.route(call)
    answer = TranslateResponse(translations=translations, src=call.src, tgt=call.tgt, pivot=call.pivot,
                               route=route, direction=route)
    if truncated:
        answer.truncated = truncated
    return answer


def _base64_float32(vector: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode("ascii")


def _rounded(weights: np.ndarray) -> list[Any]:
    """Weights for JSON: 6 decimals are more than a heat map shows, and a third of the bytes."""
    return np.round(weights.astype(np.float64), 6).tolist()


def build_app(model: Model, limits: ServiceLimits | None = None, model_name: str | None = None,
              api_key: str | None = None) -> FastAPI:
    """The HTTP service over `model`: POST /translate (one target, or several from one encoding), /embed,
    /v1/embeddings, /attention, /similarity; GET /health, /languages, /directions, /model, /metrics, /docs,
    and the web page at /. `model_name` is what /health and /model report (default: the checkpoint's
    path); with `api_key`, every request but /health, the page and the docs needs it (`auth.py`)."""
    limits = limits or ServiceLimits()
    check_api_key(api_key)  # an empty key is an error, never a service without one
    name = model_name or str(model.path or "interlingua")
    check = _LanguageCheck(model)
    attention_check = _AttentionCheck(model)
    guess_languages = _LanguageGuess(check.languages.sources)
    metrics = ServiceMetrics()
    in_flight = InFlight()
    max_len = model.preprocess.max_len

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Draining on the way out: whatever is queued or in the model when the server stops is answered.
        async with DynamicBatcher(partial(run_model_call, model), max_wait_ms=limits.max_wait_ms,
                                  max_batch_texts=limits.max_batch_texts, max_batch_tokens=limits.max_batch_tokens,
                                  count_tokens=lambda text: estimated_subwords(text, max_len),
                                  on_batch=metrics.batch) as batcher:
            app.state.batcher = batcher
            metrics.watch(lambda: batcher.queued, lambda: in_flight.count)
            yield

    auth = (" With an API key (--api-key), every endpoint but /health, the page and these docs needs the header "
            "`Authorization: Bearer KEY`.") if api_key else ""
    app = FastAPI(title="interlingua", version=_package_version(), lifespan=lifespan,
                  docs_url=None, redoc_url=None, swagger_ui_oauth2_redirect_url=None,  # /docs: page_routes.py
                  description="Translation and language-agnostic sentence vectors from an interlingua checkpoint "
                              f"({name}). Errors: `{{\"error\": {{\"message\", \"field\"}}}}`. Answers of "
                              "the POST endpoints carry X-Total-Time, X-Queue-Time and X-Inference-Time "
                              "(milliseconds)." + auth)
    app.state.limits = limits
    install_error_handlers(app)
    post: dict[str, Any] = {"dependencies": [Depends(require_json)], "responses": ERROR_RESPONSES}

    @app.post("/translate", response_model=TranslateResponse | TranslateTargetsResponse,
              response_model_exclude_unset=True, **post)  # `through_pivot` only where asked for
    async def translate(body: TranslateRequest, request: Request) -> TranslateResponse | TranslateTargetsResponse:
        """Translate `texts` from `src` to `tgt`, greedy (beam 1) or with beam search, optionally through `pivot`;
        with `tgts` instead of `tgt`, into each of several targets from one encoding of the texts."""
        check_texts(body.texts, "body.texts", limits)
        check.source(body.src, "body.src")
        tgts = check.targets(body.tgt, body.tgts)
        calls = [TranslateCall.normalised(body.src, tgt, body.beam, body.pivot, body.beam_stop, body.no_repeat_ngram)
                 for tgt in tgts]
        pivot = next((call.pivot for call in calls if call.pivot is not None), None)
        if pivot is not None:
            check.target(pivot, "body.pivot")
            check.source(pivot, "body.pivot")
        if body.compare_pivot and (body.tgts is not None or body.pivot is not None):
            raise RequestFieldError("body.compare_pivot", "compare_pivot compares one target's direct translation "
                                    "with the model's pivot: send it with `tgt` and without `pivot`")
        cut = model.truncated(body.texts, body.src)  # said in the answer: the client sees no server log
        if body.tgts is None:
            through = model.languages.pivot(body.src, calls[0].tgt) if (
                body.compare_pivot and check.route(calls[0]) == "zero-shot") else None
            if through is None:
                answer = _translated(calls[0], await _submit(request, calls[0], body.texts), check, cut)
                if body.compare_pivot:
                    answer.through_pivot = None  # asked for: said to be none
                return answer
            via = TranslateCall.normalised(body.src, calls[0].tgt, body.beam, through, body.beam_stop,
                                           body.no_repeat_ngram)
            direct, pivoted = await asyncio.gather(_submit(request, calls[0], body.texts),
                                                   _submit(request, via, body.texts))
            answer = _translated(calls[0], direct, check, cut)
            answer.through_pivot = PivotTranslations(pivot=through, translations=pivoted)
            return answer
        many = TranslateTargetsCall.normalised(body.src, tuple(tgts), body.beam, body.pivot, body.beam_stop,
                                               body.no_repeat_ngram)
        rows: list[tuple[str, ...]] = await _submit(request, many, body.texts)
        return TranslateTargetsResponse(src=body.src, results=[
            _translated(call, [row[j] for row in rows], check, cut) for j, call in enumerate(calls)])

    @app.post("/embed", response_model=EmbedResponse, response_model_exclude_unset=True, **post)
    async def embed(body: EmbedRequest, request: Request) -> EmbedResponse:
        """Sentence vectors of `texts` in `lang`: mean pooling (dim,) or one vector per bridge head (heads, dim)."""
        check_texts(body.texts, "body.texts", limits)
        check.source(body.lang, "body.lang")
        if body.pooling == "heads" and model.heads is None:
            raise RequestFieldError("body.pooling", "pooling 'heads' needs an attention-bridge model; this one has "
                                                    "none (use 'mean')")
        encoded: list[EncodedText] = await _submit(request, EncodeCall(body.lang, body.pooling), body.texts)
        answer = EmbedResponse(vectors=np.stack([e.vector for e in encoded]).tolist(), dim=model.dim)
        cut = model.truncated(body.texts, body.lang)
        if cut:
            answer.truncated = cut
        return answer

    @app.post("/v1/embeddings", response_model=OpenAIEmbeddingResponse, **post)
    async def openai_embeddings(body: OpenAIEmbeddingRequest, request: Request) -> OpenAIEmbeddingResponse:
        """OpenAI-compatible embeddings (mean pooling); without `language`, each text's language is identified."""
        single = isinstance(body.input, str)
        texts = [body.input] if isinstance(body.input, str) else body.input
        check_texts(texts, "body.input", limits, indexed=not single)
        if body.language is not None:
            check.source(body.language, "body.language")
            langs = [body.language] * len(texts)
        else:
            langs = await guess_languages(texts)
        encoded = await _encode_each(request, texts, langs, count_tokens=True)
        data = [EmbeddingObject(index=i, language=langs[i],
                                embedding=_base64_float32(e.vector) if body.encoding_format == "base64"
                                else e.vector.tolist())
                for i, e in enumerate(encoded)]
        tokens = sum(e.tokens for e in encoded)
        return OpenAIEmbeddingResponse(data=data, model=body.model,
                                       usage=Usage(prompt_tokens=tokens, total_tokens=tokens))

    @app.get("/health", response_model=HealthResponse)
    async def health() -> HealthResponse:
        """Liveness: the model is loaded and the service answers."""
        return HealthResponse(model=name, languages=list(check.languages.sources))

    @app.get("/languages", response_model=LanguagesResponse)
    async def languages() -> LanguagesResponse:
        """The languages the model reads and writes, its trained directions and its zero-shot ones."""
        langs = check.languages
        return LanguagesResponse(languages=list(langs.sources), targets=list(langs.targets),
                                 trained=[[s, t] for s, t in langs.trained],
                                 zero_shot=[[s, t] for s, t in langs.zero_shot])

    @app.get("/directions", response_model=DirectionsResponse)
    async def directions() -> DirectionsResponse:
        """Every direction between two of the model's languages: supervised (trained) or zero-shot, and a
        language to pivot through instead (`Languages.route`, `Languages.pivot`)."""
        langs = check.languages
        return DirectionsResponse(directions=[
            DirectionInfo(src=s, tgt=t, route=route, kind=route, pivot=langs.pivot(s, t))
            for s in langs.sources for t in langs.targets if s != t for route in [langs.route(s, t)]])

    @app.get("/model", response_model=ModelInfoResponse)
    async def model_info() -> ModelInfoResponse:
        """What the model is made of (so what POST /attention can show) and the request limits."""
        langs = check.languages
        return ModelInfoResponse(model=name, languages=list(langs.sources), targets=list(langs.targets),
                                 encoder=model.kinds.encoder, bridge=model.kinds.bridge,
                                 heads=model.heads, bridge_attention=attention_check.bridge,
                                 self_attention_layers=attention_check.layers, max_texts=limits.max_texts,
                                 max_chars=limits.max_chars)

    @app.post("/attention", response_model=AttentionResponse, **post)
    async def attention(body: AttentionRequest, request: Request) -> AttentionResponse:
        """What one sentence's bridge heads attend to over its subwords, and the self-attention of one
        encoder layer (Transformer encoders): `Model.attention_maps`."""
        check_written([body.text], "body.text", limits, indexed=False)
        check.source(body.lang, "body.lang")
        layer = attention_check.layer(body.layer)
        maps: AttentionMaps = (await _submit(request, AttentionCall(body.lang), [body.text]))[0]
        return AttentionResponse(
            tokens=maps.tokens, lang=body.lang, layer=layer, layers=attention_check.layers,
            bridge=None if maps.bridge is None else _rounded(maps.bridge),
            self_attention=None if maps.self_attention is None or layer is None
            else _rounded(maps.self_attention[layer - 1]))

    @app.post("/similarity", response_model=SimilarityResponse, **post)
    async def similarity(body: SimilarityRequest, request: Request) -> SimilarityResponse:
        """Cosine similarity of the texts' sentence vectors (mean pooling, each text by its own language's
        encoder): how close the bridge puts sentences across languages."""
        check_written(body.texts, "body.texts", limits)
        if len(body.langs) != len(body.texts):
            raise RequestFieldError("body.langs", f"{len(body.langs)} languages for {len(body.texts)} texts: give "
                                                  "one language per text")
        for index, lang in enumerate(body.langs):
            check.source(lang, f"body.langs.{index}")
        encoded = await _encode_each(request, body.texts, body.langs)
        vectors = np.stack([e.vector for e in encoded])
        return SimilarityResponse(similarity=_rounded(cosine_matrix(vectors, vectors)), langs=body.langs)

    @app.get("/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE: {}}}})
    async def prometheus_metrics() -> Response:
        """Prometheus metrics (text format): requests by endpoint and status, latency, queue and inference
        time, queue depth, requests in flight, batch sizes in texts and in estimated subwords."""
        return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    install_page(app)
    endpoints = {path for route in app.routes if isinstance(path := getattr(route, "path", None), str)}
    # add_middleware puts each outside the ones before it: the last added sees a request first.
    app.add_middleware(BodyGuard, payload_limit=limits.payload_limit, read_timeout_s=limits.read_timeout_s)
    app.add_middleware(AdmissionLimit, paths=MODEL_PATHS, limit=limits.max_concurrent_requests, in_flight=in_flight)
    if api_key is not None:
        app.add_middleware(ApiKey, key=api_key)
    app.add_middleware(Measured, metrics=metrics, endpoints=endpoints, model_paths=MODEL_PATHS)
    return app
