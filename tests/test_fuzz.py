"""Fuzzing: property-based tests of the Python API's text inputs (Hypothesis), and of the HTTP service
from its own /openapi.json (Schemathesis), against the real uvicorn server as `interlingua serve` runs it.

What must hold for any input: the Python API answers (one output per text, in order) or raises a
`TypeError` / `ValueError` / `LanguageError` that names the argument; the service never answers 5xx,
every 4xx is the service's JSON error naming its field, and the server log holds no traceback.

Bounded for CI (well under a minute together): a fixed number of examples per test, derandomized (the
same examples on every run, so a red run is a finding, never noise), no example database, and a
generous per-example deadline that still catches a pathological slowdown. What the fuzzers found is
kept below as plain regression tests."""
from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from datetime import timedelta

import numpy as np
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from test_serve import TRANSLATE, model  # noqa: F401 (fixture)
from test_serve_limits import LiveServer, live_server

from interlingua.data.inputs import text_problem
from interlingua.errors import LanguageError
from interlingua.serving.app import build_app
from interlingua.serving.limits import ServiceLimits


def fuzz_settings(examples: int) -> settings:
    return settings(max_examples=examples, derandomize=True, database=None, deadline=timedelta(seconds=10),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


# --- the Python API -----------------------------------------------------------------------------------

# Pieces that have broken text handling elsewhere: control and format characters, line and paragraph
# separators, a byte-order mark, lone surrogates, the vocabulary's own symbols and language tags,
# combining marks, characters NFKC changes, astral and non-characters, long runs.
TRICKY = ["", " ", "\t", "\n", "\r\n", "\r", "\x00", "\x0b", "\x1f", "\x7f", "\x85", "\u2028", "\u2029", "\u200b",
          "\u200d", "\u202e", "\ufeff", "\ud800", "\udfff", "<s>", "</s>", "<unk>", "<pad>", "<2de>", "<2en>", "\u2581",
          "\u0301", "\U0001f600", "\U0010ffff", "\uffff", "\ufffd", "\u00df", "\u0130", "\ufb01", "\u216b", "\u01c5",
          "\u3000", "..", "a" * 500, " " * 300]
pieces = st.one_of(st.text(max_size=20), st.sampled_from(TRICKY), st.text(st.characters(codec="ascii"), max_size=20))
any_text = st.lists(pieces, max_size=5).map("".join)
any_texts = st.lists(any_text, max_size=5)
not_texts = st.one_of(st.none(), st.integers(), st.binary(), any_text, st.dictionaries(any_text, any_text, max_size=2),
                      st.sets(any_text, max_size=2),
                      st.lists(st.one_of(any_text, st.integers(), st.none(), st.binary()), min_size=1, max_size=3)
                      .filter(lambda items: not all(isinstance(item, str) for item in items)))


def invalid_index(texts: list[str]) -> int | None:
    """The first text that is not valid Unicode (a lone surrogate), which the API must refuse by index."""
    return next((i for i, text in enumerate(texts) if text_problem(text) is not None), None)


def refused_by_index(err: ValueError, texts: list[str]) -> bool:
    index = invalid_index(texts)
    return index is not None and f"texts[{index}]" in str(err) and "surrogate" in str(err)


@fuzz_settings(60)
@given(texts=any_texts, beam=st.integers(1, 4))
def test_translate_takes_any_text(model, texts, beam):  # noqa: F811
    try:
        out = model.translate(texts, "en", "de", beam=beam)
    except ValueError as err:
        assert refused_by_index(err, texts), err
        return
    assert invalid_index(texts) is None
    assert len(out) == len(texts) and all(isinstance(line, str) and text_problem(line) is None for line in out)
    assert all(line == "" for text, line in zip(texts, out) if text == "")


@fuzz_settings(60)
@given(texts=any_texts, pooling=st.sampled_from(["mean", "heads"]))
def test_encode_takes_any_text(model, texts, pooling):  # noqa: F811
    try:
        vectors = model.encode(texts, "en", pooling=pooling)
    except ValueError as err:
        assert refused_by_index(err, texts), err
        return
    width = (len(texts), model.dim) if pooling == "mean" else (len(texts), model.heads, model.dim)
    assert vectors.shape == width and vectors.dtype == np.float32 and np.isfinite(vectors).all()
    assert all(not vectors[i].any() for i, text in enumerate(texts) if text == "")


@fuzz_settings(30)
@given(texts=any_texts)
def test_represent_then_generate_is_translate_for_any_text(model, texts):  # noqa: F811
    try:
        representation = model.represent(texts, "de")
    except ValueError as err:
        assert refused_by_index(err, texts), err
        return
    assert model.generate(representation, "en") == model.translate(texts, "de", "en")


@fuzz_settings(60)
@given(texts=not_texts)
def test_anything_but_a_list_of_strings_is_a_type_error_naming_texts(model, texts):  # noqa: F811
    """(Or a `ValueError` naming the first item at fault where that is a string but not valid Unicode.)"""
    for call in (lambda: model.translate(texts, "en", "de"), lambda: model.encode(texts, "en"),
                 lambda: model.represent(texts, "en")):
        with pytest.raises((TypeError, ValueError), match=r"^texts") as raised:
            call()
        assert raised.type is TypeError or refused_by_index(raised.value, texts)


@fuzz_settings(60)
@given(lang=any_text.filter(lambda lang: lang not in ("en", "de")))
def test_a_language_the_model_lacks_is_a_language_error(model, lang):  # noqa: F811
    for call in (lambda: model.translate(["a dog"], lang, "de"), lambda: model.translate(["a dog"], "en", lang),
                 lambda: model.encode(["a dog"], lang), lambda: model.represent(["a dog"], lang)):
        with pytest.raises(LanguageError, match="de, en"):
            call()


# --- the HTTP service, from its own OpenAPI description -----------------------------------------------

OPERATIONS = ["POST /translate", "POST /embed", "POST /v1/embeddings", "POST /attention", "POST /similarity",
              "GET /health", "GET /languages", "GET /directions", "GET /model", "GET /metrics"]
POSTS = [op for op in OPERATIONS if op.startswith("POST")]
LANGUAGES = st.sampled_from(["en", "de"])
MAX_TEXTS = 8
"""The fuzzed service's --max-texts (small: cheap model calls)."""


class ServerLog(logging.Handler):
    """What the server logs at ERROR and above, and any record that carries a traceback."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or record.exc_info or "Traceback" in record.getMessage():
            self.records.append(record)


class Service:
    def __init__(self, server: LiveServer, log: ServerLog):
        self.url = f"http://127.0.0.1:{server.port}"
        self.log = log
        self.schema = schemathesis.openapi.from_url(f"{self.url}/openapi.json")
        self.session = requests.Session()
        self.operations = {f"{op.method.upper()} {op.path}": op for op in
                           (result.ok() for result in self.schema.get_all_operations())}


@pytest.fixture(scope="module")
def service(model) -> Iterator[Service]:  # noqa: F811
    """The service with small text limits (cheap model calls), and a watch on every log it writes."""
    limits = ServiceLimits(max_texts=MAX_TEXTS, max_chars=300)
    log = ServerLog()
    watched = [logging.getLogger(), logging.getLogger("uvicorn"), logging.getLogger("uvicorn.error")]
    with live_server(build_app(model, limits), limits) as server:
        for logger in watched:
            logger.addHandler(log)
        try:
            yield Service(server, log)
        finally:
            for logger in watched:
                logger.removeHandler(log)


def named_error(response: requests.Response) -> str | None:
    """What is wrong with a 4xx answer, or None: it must be the service's JSON error naming its field."""
    try:
        error = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        return f"not the service's JSON error: {response.text[:200]!r}"
    if not isinstance(error.get("field"), str) or not error["field"] or not error.get("message"):
        return f"an error that names no field: {error}"
    return None


def checked(service: Service, case: schemathesis.Case, mode: GenerationMode) -> None:
    """Send `case` and hold the answer to the rules above and to the OpenAPI description."""
    logged = len(service.log.records)
    response = case.call(session=service.session, timeout=30)
    assert response.status_code < 500, f"{case.method} {case.path} -> {response.status_code}: {response.text[:300]}"
    if 400 <= response.status_code < 500:
        problem = named_error(response)
        assert problem is None, f"{case.method} {case.path} -> {response.status_code}: {problem}"
    checks = [schemathesis.checks.status_code_conformance, schemathesis.checks.content_type_conformance,
              schemathesis.checks.response_schema_conformance]
    if mode is GenerationMode.NEGATIVE:
        checks.append(schemathesis.checks.negative_data_rejection)
    case.validate_response(response, checks=checks)
    tracebacks = [record.getMessage() for record in service.log.records[logged:]]
    assert not tracebacks, f"{case.method} {case.path}: the server logged {tracebacks}"


def towards_the_model(data: st.DataObject, body: object) -> object:
    """Most positive bodies reshaped to pass the checks the service makes beyond the schema (languages the
    model has, 1 to MAX_TEXTS texts, `tgt` or `tgts`, one language per text), so that the fuzzed texts,
    beams and poolings reach the model rather than stopping at a 422."""
    if not isinstance(body, dict) or not data.draw(st.integers(0, 3), label="reshape"):
        return body
    body = dict(body)
    for name in ("src", "tgt", "pivot", "lang", "language"):
        if body.get(name) is not None:
            body[name] = data.draw(LANGUAGES, label=name)
    for name in ("texts", "input"):
        if isinstance(body.get(name), list):
            body[name] = body[name][:MAX_TEXTS] or ["a dog"]
    if "src" in body:  # a translation: one target, or a list of different ones
        if body.get("tgts") is not None:
            body.pop("tgt", None)
            body["tgts"] = data.draw(st.lists(LANGUAGES, min_size=1, max_size=2, unique=True), label="tgts")
        elif body.get("tgt") is None:
            body["tgt"] = data.draw(LANGUAGES, label="tgt")
    if "langs" in body and isinstance(body.get("texts"), list):
        body["langs"] = [data.draw(LANGUAGES, label="langs") for _ in body["texts"]]
    return body


def test_the_fuzz_covers_every_operation(service):
    assert sorted(service.operations) == sorted(OPERATIONS)


@pytest.mark.parametrize("operation", OPERATIONS)
def test_the_service_fuzzed_with_valid_requests(service, operation):
    """Requests that fit the OpenAPI description, most of them reshaped to reach the model."""
    op = service.operations[operation]
    examples = 40 if operation.startswith("POST") else 3

    @fuzz_settings(examples)
    @given(case=op.as_strategy(GenerationMode.POSITIVE), data=st.data())
    def fuzz(case: schemathesis.Case, data: st.DataObject) -> None:
        case.body = towards_the_model(data, case.body)
        checked(service, case, GenerationMode.POSITIVE)

    fuzz()


@pytest.mark.parametrize("operation", POSTS)
def test_the_service_fuzzed_with_invalid_requests(service, operation):
    """Requests that break the OpenAPI description: wrong types, missing fields, bodies that are not JSON."""
    op = service.operations[operation]

    @fuzz_settings(40)
    @given(case=op.as_strategy(GenerationMode.NEGATIVE))
    def fuzz(case: schemathesis.Case) -> None:
        checked(service, case, GenerationMode.NEGATIVE)

    fuzz()


# --- what the fuzzers found -----------------------------------------------------------------------------


@pytest.mark.parametrize("raw, words", [
    (b'{"texts": ["\xff"], "src": "en", "tgt": "de"}', ["not UTF-8", "0xff", "offset 12"]),
    (b"\xb5?+\xb9\xc5\x84\nDL", ["not UTF-8", "0xb5", "offset 0"]),
    (b"[" * 100_000 + b"]" * 100_000, ["nested too deeply"]),
    (b'{"texts": ["a"], "src": "en", "tgt": "de", "beam": 1' + b"0" * 5000 + b"}", ["too many digits"]),
], ids=["not-utf8-in-a-string", "not-utf8", "nested", "digits"])
def test_a_body_the_json_parser_cannot_read_is_a_400_naming_the_body(service, raw, words):
    """FastAPI answers these with a 400 "There was an error parsing the body" and no field."""
    response = service.session.post(f"{service.url}/translate", data=raw,
                                     headers={"Content-Type": "application/json"}, timeout=30)
    assert response.status_code == 400 and response.json()["error"]["field"] == "body", response.text
    for word in words:
        assert word in response.json()["error"]["message"]


@pytest.mark.parametrize("beam, status", [(2.0, 200), (2, 200), (2.5, 422), ("2", 422), (True, 422), (1e300, 422)])
def test_a_whole_number_may_be_written_as_a_float(service, beam, status):
    """JSON Schema's `integer` (the OpenAPI description's) takes 2.0; Schemathesis sends it, as do encoders that
    write every number as a float. A fraction, a string and a boolean stay a 422 naming the field."""
    response = service.session.post(f"{service.url}/translate", json={**TRANSLATE, "beam": beam}, timeout=30)
    assert response.status_code == status, response.text
    if status == 422:
        assert response.json()["error"]["field"] == "body.beam"


def test_every_response_schema_is_one_every_openapi_tool_reads(service):
    """Tuples became `prefixItems` (JSON Schema 2020-12), which Schemathesis, among others, cannot read in
    a response: the directions of GET /languages are two-item arrays instead, as the JSON always was."""
    description = requests.get(f"{service.url}/openapi.json", timeout=30).text
    assert "prefixItems" not in description
    languages = requests.get(f"{service.url}/languages", timeout=30).json()
    assert ["en", "de"] in languages["trained"] and all(len(pair) == 2 for pair in languages["trained"])
    case = service.operations["GET /languages"].Case()
    case.validate_response(case.call(timeout=30), checks=[schemathesis.checks.response_schema_conformance])


def test_a_nameless_4xx_is_a_finding():
    """The rule itself: a JSON error without a field, or any other body, fails the fuzz."""
    def answer(status: int, body: object) -> requests.Response:
        response = requests.Response()
        response.status_code, response._content = status, json.dumps(body).encode()
        return response

    assert named_error(answer(422, {"error": {"message": "m", "field": "body.texts.1"}})) is None
    assert re.search("names no field", named_error(answer(422, {"error": {"message": "m", "field": None}})) or "")
    assert re.search("not the service's", named_error(answer(400, {"detail": "x"})) or "")
