"""`interlingua serve`: the HTTP service answers what the library answers, rejects bad requests with
a 4xx naming the field, batches concurrent requests, and stops gracefully on SIGTERM."""
from __future__ import annotations

import asyncio
import base64
import dataclasses
import gzip
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path

import numpy as np
import pytest

with warnings.catch_warnings():  # newer Starlette prefers httpx2 for its test client; httpx works with every version
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

from conftest import MULTI30K, REPO

from interlingua.cli import main
from interlingua.inference.api import Model, load
from interlingua.model_files.checkpoint import load_checkpoint
from interlingua.serving import schemas
from interlingua.serving.app import build_app
from interlingua.serving.batcher import BatcherClosed, DynamicBatcher
from interlingua.serving.limits import ServiceLimits

# The fixture model (tests/conftest.py) is trained on en<->de plus the copy directions en->en, de->de.
EN = ["A man is riding a bicycle down the street.", "Two dogs are playing in the snow.", "A woman sings on a stage."]
DE = ["Ein Mann fährt mit dem Fahrrad die Straße hinunter.", "Zwei Hunde spielen im Schnee.",
      "Eine Frau singt auf einer Bühne."]


@pytest.fixture(scope="module")
def model(trained_model) -> Model:
    return load(trained_model, "cpu")


@pytest.fixture(scope="module")
def client(model):
    with TestClient(build_app(model)) as test_client:
        yield test_client


def post(client: TestClient, path: str, body) -> tuple[int, dict]:
    response = client.post(path, json=body)
    return response.status_code, response.json()


# --- what the endpoints answer ------------------------------------------------------------------------


@pytest.mark.parametrize("beam", [1, 3])
def test_translate_answers_what_the_library_does(client, model, beam):
    texts = [*EN, ""]
    status, body = post(client, "/translate", {"texts": texts, "src": "en", "tgt": "de", "beam": beam})
    assert status == 200, body
    assert body == {"translations": model.translate(texts, "en", "de", beam=beam), "src": "en", "tgt": "de",
                    "pivot": None, "route": "supervised", "direction": "supervised"}
    assert body["translations"][-1] == ""  # an empty line stays empty, as in the library


def test_a_text_longer_than_the_model_reads_is_named_in_the_answer(client, model):
    """The model reads `max_len` subwords of a text; the rest used to be dropped with a line in the server's log
    only, so a client sending a paragraph got the translation of its first sentence without a word."""
    long = " ".join(EN * 6)  # under the service's 2,000 characters, over the model's 40 subwords
    texts = [EN[0], long, EN[1]]
    assert model.truncated(texts, "en") == [1] and model.truncated(EN, "en") == []
    status, body = post(client, "/translate", {"texts": texts, "src": "en", "tgt": "de"})
    assert status == 200 and body["truncated"] == [1] and body["translations"] == model.translate(texts, "en", "de")
    status, body = post(client, "/translate", {"texts": texts, "src": "en", "tgts": ["de", "en"]})
    assert status == 200 and [r["truncated"] for r in body["results"]] == [[1], [1]]
    status, body = post(client, "/embed", {"texts": texts, "lang": "en"})
    assert status == 200 and body["truncated"] == [1] and len(body["vectors"]) == 3
    status, body = post(client, "/embed", {"texts": EN, "lang": "en"})
    assert status == 200 and "truncated" not in body  # only where something was cut


def test_translate_with_the_top_beam_stop_rule(client, model):
    texts = ["A dog runs on the grass .", "Two men are talking ."]
    status, body = post(client, "/translate", {"texts": texts, "src": "en", "tgt": "de", "beam": 3, "beam_stop": "top"})
    assert status == 200 and body["translations"] == model.translate(texts, "en", "de", beam=3, beam_stop="top")


def test_translate_without_repeated_ngrams(client, model):
    texts = ["A dog runs on the grass .", "Two men are talking .", "A man in a red shirt and a red hat ."]
    status, body = post(client, "/translate", {"texts": texts, "src": "en", "tgt": "de", "no_repeat_ngram": 1})
    assert status == 200 and body["translations"] == model.translate(texts, "en", "de", no_repeat_ngram=1)
    assert body["translations"] != model.translate(texts, "en", "de")
    status, body = post(client, "/translate", {"texts": texts, "src": "en", "tgts": ["de", "en"], "beam": 2,
                                               "no_repeat_ngram": 1})
    assert status == 200 and body["results"][0]["translations"] == model.translate(texts, "en", "de", beam=2,
                                                                                     no_repeat_ngram=1)


def test_translate_through_a_pivot(client, model):
    status, body = post(client, "/translate", {"texts": EN, "src": "en", "tgt": "en", "pivot": "de"})
    assert status == 200, body
    assert body["translations"] == model.translate(EN, "en", "en", pivot="de")
    assert (body["pivot"], body["route"], body["direction"]) == ("de", "pivot", "pivot")
    # A pivot equal to the target is the direct translation, and the answer says so.
    status, body = post(client, "/translate", {"texts": EN, "src": "en", "tgt": "de", "pivot": "de"})
    assert (status, body["pivot"], body["route"]) == (200, None, "supervised")
    assert body["translations"] == model.translate(EN, "en", "de")


@pytest.mark.parametrize("beam", [1, 3])
def test_translate_into_every_target_answers_what_each_target_does(client, model, beam):
    texts = [*EN, ""]
    status, body = post(client, "/translate", {"texts": texts, "src": "en", "tgts": ["de", "en"], "beam": beam})
    assert status == 200, body
    singles = [post(client, "/translate", {"texts": texts, "src": "en", "tgt": tgt, "beam": beam})[1]
               for tgt in ("de", "en")]
    assert body == {"src": "en", "results": singles}
    assert [r["translations"] for r in body["results"]] == [model.translate(texts, "en", tgt, beam=beam)
                                                           for tgt in ("de", "en")]
    assert [r["route"] for r in body["results"]] == ["supervised", "supervised"]


def test_every_target_from_one_encoding(trained_model):
    """The all-targets request encodes its texts once and writes them out per target; one target
    alone is the plain translation, as before."""
    model = load(trained_model, "cpu")
    calls: list[tuple[str, str | None]] = []
    represent, generate = model.represent, model.generate

    def counted_represent(texts, lang, *args, **kwargs):
        calls.append(("represent", lang))
        return represent(texts, lang, *args, **kwargs)

    def counted_generate(rep, tgt, *args, **kwargs):
        calls.append(("generate", tgt))
        return generate(rep, tgt, *args, **kwargs)

    model.represent, model.generate = counted_represent, counted_generate
    with TestClient(build_app(model)) as test_client:
        status, body = post(test_client, "/translate", {"texts": DE, "src": "de", "tgts": ["en", "de"], "beam": 2})
        assert status == 200, body
        assert calls == [("represent", "de"), ("generate", "en"), ("generate", "de")]
        status, body = post(test_client, "/translate", {"texts": DE, "src": "de", "tgt": "en"})
        assert status == 200 and len(calls) == 3 + 2


def test_direction_not_trained_is_reported_as_zero_shot(trained_model):
    # as if de->en had never been trained
    model = Model(dataclasses.replace(load_checkpoint(trained_model, "cpu"), directions=[("en", "de")]))
    with TestClient(build_app(model)) as test_client:
        status, body = post(test_client, "/translate", {"texts": DE[:1], "src": "de", "tgt": "en"})
        assert (status, body["route"], body["direction"]) == (200, "zero-shot", "zero-shot")
        assert test_client.get("/languages").json()["zero_shot"] == [["de", "en"]]


@pytest.mark.parametrize("pooling", ["mean", "heads"])
def test_embed_answers_what_encode_does(client, model, pooling):
    texts = [*DE, ""]
    status, body = post(client, "/embed", {"texts": texts, "lang": "de", "pooling": pooling})
    assert status == 200, body
    vectors = np.asarray(body["vectors"], dtype=np.float32)
    expected = model.encode(texts, "de", pooling=pooling)
    assert vectors.shape == expected.shape and body["dim"] == model.dim == expected.shape[-1]
    np.testing.assert_allclose(vectors, expected, atol=1e-5)
    assert not vectors[-1].any()  # an empty text gets zeros, as in the library


def test_openai_embeddings_fields_and_vectors(client, model):
    status, body = post(client, "/v1/embeddings", {"input": [*EN, ""], "model": "my-model", "language": "en"})
    assert status == 200, body
    assert body["object"] == "list" and body["model"] == "my-model"
    assert [(item["object"], item["index"], item["language"]) for item in body["data"]] == \
        [("embedding", i, "en") for i in range(4)]
    np.testing.assert_allclose(np.asarray([item["embedding"] for item in body["data"]], dtype=np.float32),
                               model.encode([*EN, ""], "en"), atol=1e-5)
    tokens = sum(len(ids) for ids in model.token_ids(EN, "en"))
    assert tokens > len(EN) and body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}


def test_openai_embeddings_single_string_and_base64(client, model):
    status, body = post(client, "/v1/embeddings", {"input": EN[0], "model": "m", "language": "en",
                                                  "encoding_format": "base64"})
    assert status == 200, body
    assert len(body["data"]) == 1
    vector = np.frombuffer(base64.b64decode(body["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(vector, model.encode(EN[:1], "en")[0], atol=1e-6)


def test_openai_embeddings_identify_each_texts_language(client, model):
    texts = [EN[0], DE[0], EN[1], DE[1]]
    status, body = post(client, "/v1/embeddings", {"input": texts, "model": "m"})
    assert status == 200, body
    assert [item["language"] for item in body["data"]] == ["en", "de", "en", "de"]
    vectors = np.asarray([item["embedding"] for item in body["data"]], dtype=np.float32)
    np.testing.assert_allclose(vectors[[0, 2]], model.encode([EN[0], EN[1]], "en"), atol=1e-5)
    np.testing.assert_allclose(vectors[[1, 3]], model.encode([DE[0], DE[1]], "de"), atol=1e-5)


def test_health_languages_and_docs(client, model, trained_model):
    assert client.get("/health").json() == {"status": "ok", "model": str(trained_model), "languages": ["de", "en"]}
    languages = client.get("/languages").json()
    assert languages["languages"] == ["de", "en"] and languages["targets"] == ["de", "en"]
    assert sorted(map(tuple, languages["trained"])) == sorted(model.languages.trained)
    assert languages["zero_shot"] == []
    assert client.get("/docs").status_code == 200
    assert {"/translate", "/embed", "/v1/embeddings", "/health", "/languages"} <= set(
        client.get("/openapi.json").json()["paths"])


# --- bad requests: a 4xx JSON error that names the field --------------------------------------------

TRANSLATE = {"texts": ["A dog runs."], "src": "en", "tgt": "de"}
EMBED = {"texts": ["A dog runs."], "lang": "en"}
OPENAI = {"input": ["A dog runs."], "model": "m"}

BAD_BODIES = [
    # (endpoint, body, status, field, words the message must contain)
    ("/translate", {**TRANSLATE, "src": "xx"}, 422, "body.src", ["'xx'", "de, en"]),
    ("/translate", {**TRANSLATE, "tgt": "fr"}, 422, "body.tgt", ["'fr'", "de, en"]),
    ("/translate", {**TRANSLATE, "pivot": "cs"}, 422, "body.pivot", ["'cs'", "de, en"]),
    ("/embed", {**EMBED, "lang": "xx"}, 422, "body.lang", ["'xx'", "de, en"]),
    ("/v1/embeddings", {**OPENAI, "language": "xx"}, 422, "body.language", ["'xx'", "de, en"]),
    ("/translate", {**TRANSLATE, "texts": []}, 422, "body.texts", ["empty"]),
    ("/embed", {**EMBED, "texts": []}, 422, "body.texts", ["empty"]),
    ("/v1/embeddings", {**OPENAI, "input": []}, 422, "body.input", ["empty"]),
    ("/translate", {**TRANSLATE, "texts": ["a"] * 65}, 422, "body.texts", ["65", "64"]),
    ("/v1/embeddings", {**OPENAI, "input": ["a"] * 65}, 422, "body.input", ["65", "64"]),
    ("/translate", {**TRANSLATE, "texts": ["a", "b", "c" * 2001]}, 422, "body.texts.2", ["text 2", "2001", "2000"]),
    ("/embed", {**EMBED, "texts": ["x" * 2001]}, 422, "body.texts.0", ["text 0", "2000"]),
    ("/v1/embeddings", {**OPENAI, "input": "x" * 2001}, 422, "body.input", ["2001", "2000"]),
    ("/translate", {**TRANSLATE, "texts": "A dog runs."}, 422, "body.texts", ["list"]),
    ("/translate", {**TRANSLATE, "texts": ["a", 5]}, 422, "body.texts.1", ["string"]),
    ("/translate", {**TRANSLATE, "beam": "2"}, 422, "body.beam", ["integer"]),
    ("/translate", {**TRANSLATE, "beam": 0}, 422, "body.beam", ["greater than or equal to 1"]),
    ("/translate", {**TRANSLATE, "beam": 11}, 422, "body.beam", ["less than or equal to 10"]),
    ("/translate", {**TRANSLATE, "beam": True}, 422, "body.beam", ["integer"]),
    ("/translate", {**TRANSLATE, "beam": 2, "beam_stop": "first"}, 422, "body.beam_stop", ["'all' or 'top'"]),
    ("/translate", {**TRANSLATE, "no_repeat_ngram": -1}, 422, "body.no_repeat_ngram", ["greater than or equal to 0"]),
    ("/translate", {"texts": ["a"], "tgt": "de"}, 422, "body.src", ["required"]),
    ("/translate", {"texts": ["a"], "src": "en"}, 422, "body.tgt", ["`tgt`", "`tgts`"]),
    ("/translate", {**TRANSLATE, "tgts": ["de"]}, 422, "body.tgts", ["either", "not both"]),
    ("/translate", {"texts": ["a"], "src": "en", "tgts": []}, 422, "body.tgts", ["empty"]),
    ("/translate", {"texts": ["a"], "src": "en", "tgts": ["de", "fr"]}, 422, "body.tgts.1", ["'fr'", "de, en"]),
    ("/translate", {"texts": ["a"], "src": "en", "tgts": ["de", "en", "de"]}, 422, "body.tgts.2", ["'de'", "twice"]),
    ("/translate", {"texts": ["a"], "src": "en", "tgts": "de"}, 422, "body.tgts", ["list"]),
    ("/translate", {"texts": ["a"], "src": "en", "tgts": ["de", 5]}, 422, "body.tgts.1", ["string"]),
    ("/translate", {"texts": ["a"], "src": "en", "tgts": ["de"], "pivot": "cs"}, 422, "body.pivot", ["'cs'"]),
    ("/translate", {**TRANSLATE, "bam": 3}, 422, "body.bam", ["unknown field"]),
    ("/translate", ["A dog runs."], 422, "body", ["dictionary"]),
    ("/embed", {**EMBED, "pooling": "max"}, 422, "body.pooling", ["'mean' or 'heads'"]),
    ("/v1/embeddings", {**OPENAI, "input": 5}, 422, "body.input", ["valid string", "valid list"]),
    ("/v1/embeddings", {**OPENAI, "input": ["a", 5]}, 422, "body.input.1", ["valid string"]),
    ("/v1/embeddings", {**OPENAI, "encoding_format": "int8"}, 422, "body.encoding_format", ["'float' or 'base64'"]),
    ("/v1/embeddings", {"input": ["a"]}, 422, "body.model", ["required"]),
    ("/v1/embeddings", {**OPENAI, "dimensions": 8}, 422, "body.dimensions", ["unknown field"]),
]


@pytest.mark.parametrize("path, body, status, field, words", BAD_BODIES,
                         ids=[f"{p}-{f}-{i}" for i, (p, _, _, f, _) in enumerate(BAD_BODIES)])
def test_bad_request_names_the_field(client, path, body, status, field, words):
    response = client.post(path, json=body)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert set(error) == {"message", "field"} and error["field"] == field
    for word in words:
        assert word in error["message"], error["message"]


@pytest.mark.parametrize("content, headers, status, field", [
    (b'{"texts": ["a"], "src": "en"', {"content-type": "application/json"}, 400, "body"),   # invalid JSON
    (b"", {"content-type": "application/json"}, 422, "body"),                               # no body
    (b"texts=a&src=en&tgt=de", {"content-type": "application/x-www-form-urlencoded"}, 415, "header.content-type"),
    (json.dumps(TRANSLATE).encode(), {"content-type": "text/plain"}, 415, "header.content-type"),
    (json.dumps(TRANSLATE).encode(), {}, 415, "header.content-type"),                       # no Content-Type
], ids=["invalid-json", "empty-body", "form", "text-plain", "no-content-type"])
def test_bad_body_or_content_type(client, content, headers, status, field):
    response = client.post("/translate", content=content, headers=headers)
    assert response.status_code == status, response.text
    assert response.json()["error"]["field"] == field


def test_json_with_charset_and_unknown_paths(client):
    response = client.post("/translate", content=json.dumps(TRANSLATE).encode(),
                           headers={"content-type": "application/json; charset=utf-8"})
    assert response.status_code == 200, response.text
    assert client.get("/nowhere").json() == {"error": {"message": "Not Found", "field": None}}
    assert client.get("/translate").status_code == 405


def test_limits_are_configurable(model):
    with TestClient(build_app(model, ServiceLimits(max_texts=2, max_chars=10))) as small:
        assert post(small, "/translate", {**TRANSLATE, "texts": ["a", "b"]})[0] == 200
        status, body = post(small, "/translate", {**TRANSLATE, "texts": ["a", "b", "c"]})
        assert (status, body["error"]["field"]) == (422, "body.texts") and "at most 2" in body["error"]["message"]
        status, body = post(small, "/embed", {**EMBED, "texts": ["short", "x" * 11]})
        assert (status, body["error"]["field"]) == (422, "body.texts.1") and "at most 10" in body["error"]["message"]


# JSON may carry a lone UTF-16 surrogate ("\ud800"); Python decodes it into a str that no tokenizer (and
# no UTF-8 encoder) takes. The raw bodies below hold the escape itself.
LONE_SURROGATES = [
    ("/translate", '{"texts": ["a", "b", "c", "\\ud800"], "src": "en", "tgt": "de"}', "body.texts.3", "U+D800"),
    ("/translate", '{"texts": ["x\\udfff"], "src": "en", "tgts": ["de", "en"]}', "body.texts.0", "U+DFFF"),
    ("/embed", '{"texts": ["a dog", "\\ud800 runs"], "lang": "en"}', "body.texts.1", "U+D800"),
    ("/v1/embeddings", '{"input": ["a dog", "\\ud800"], "model": "m"}', "body.input.1", "U+D800"),
    ("/v1/embeddings", '{"input": "\\ud800", "model": "m"}', "body.input", "U+D800"),
    ("/v1/embeddings", '{"input": ["\\ud800"], "model": "m", "language": "en"}', "body.input.0", "U+D800"),
    ("/attention", '{"text": "a \\ud800", "lang": "en"}', "body.text", "U+D800"),
    ("/similarity", '{"texts": ["a dog", "\\ud800x"], "langs": ["en", "de"]}', "body.texts.1", "U+D800"),
    # every other string of a request too: the language codes, the model name, the ignored user
    ("/translate", '{"texts": ["a"], "src": "\\ud800", "tgt": "de"}', "body.src", "U+D800"),
    ("/translate", '{"texts": ["a"], "src": "en", "tgt": "x\\udfff"}', "body.tgt", "U+DFFF"),
    ("/translate", '{"texts": ["a"], "src": "en", "tgt": "de", "pivot": "\\ud800"}', "body.pivot", "U+D800"),
    ("/translate", '{"texts": ["a"], "src": "en", "tgts": ["de", "\\ud800"]}', "body.tgts.1", "U+D800"),
    ("/embed", '{"texts": ["a dog"], "lang": "\\ud800"}', "body.lang", "U+D800"),
    ("/attention", '{"text": "a dog", "lang": "\\ud800"}', "body.lang", "U+D800"),
    ("/similarity", '{"texts": ["a dog", "a cat"], "langs": ["en", "\\ud800"]}', "body.langs.1", "U+D800"),
    ("/v1/embeddings", '{"input": "a dog", "model": "m", "language": "\\ud800"}', "body.language", "U+D800"),
    ("/v1/embeddings", '{"input": "a dog", "model": "\\ud800", "language": "en"}', "body.model", "U+D800"),
    ("/v1/embeddings", '{"input": "a dog", "model": "m", "language": "en", "user": "\\ud800"}', "body.user",
     "U+D800"),
]


@pytest.mark.parametrize("path, raw, field, code", LONE_SURROGATES,
                         ids=[f"{p}-{f}" for p, _, f, _ in LONE_SURROGATES])
def test_a_text_that_is_not_valid_unicode_is_a_422_naming_it(client, path, raw, field, code):
    response = client.post(path, content=raw.encode("ascii"), headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == field and code in error["message"] and "surrogate" in error["message"]


def test_a_request_schema_cannot_take_a_string_unchecked():
    """Every string of every request goes through one validator (`schemas.Str`); a field declared as a
    plain `str`, at any depth, is refused when its class is made."""
    with pytest.raises(TypeError, match="tgts"):
        class Unchecked(schemas._Request):
            src: schemas.Str
            tgts: list[str] | None = None


def ask_at_once(test_client: TestClient, bodies: list[bytes]) -> list[tuple[int, dict]]:
    """POST /translate with each raw body from its own thread, all released together."""
    start = threading.Barrier(len(bodies))
    answers: list[tuple[int, dict]] = [(0, {})] * len(bodies)

    def ask(i: int) -> None:
        start.wait()
        response = test_client.post("/translate", content=bodies[i], headers={"content-type": "application/json"})
        answers[i] = (response.status_code, response.json())

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return answers


def test_an_invalid_text_fails_only_its_own_request(trained_model, model):
    """Five valid requests sent together with one holding a lone surrogate: the five are answered."""
    valid = [json.dumps({**TRANSLATE, "texts": [EN[i % 3]]}).encode() for i in range(5)]
    bad = b'{"texts": ["a dog \\ud800"], "src": "en", "tgt": "de"}'
    with TestClient(build_app(load(trained_model, "cpu"), ServiceLimits(max_wait_ms=300))) as test_client:
        answers = ask_at_once(test_client, [*valid[:3], bad, *valid[3:]])
    assert [status for status, _ in answers] == [200, 200, 200, 422, 200, 200], answers
    assert answers[3][1]["error"]["field"] == "body.texts.0"
    for i, (_, body) in enumerate(answers[:3] + answers[4:]):
        assert body["translations"] == model.translate([EN[i % 3]], "en", "de")


def test_a_shared_model_call_that_fails_is_run_again_per_request(trained_model, model):
    """A text the library refuses inside a shared model call (a ValueError, the caller's fault): the call
    runs again for each request alone, the others get their answers, and the refused one a 422."""
    refusing = load(trained_model, "cpu")
    translate = refusing.translate
    calls: list[int] = []

    def picky_translate(texts, *args, **kwargs):
        calls.append(len(texts))
        if any("poison" in text for text in texts):
            raise ValueError("texts[0] is poison")
        return translate(texts, *args, **kwargs)

    refusing.translate = picky_translate
    bodies = [json.dumps({**TRANSLATE, "texts": [text]}).encode() for text in [*EN, "poison", *EN[:2]]]
    with TestClient(build_app(refusing, ServiceLimits(max_wait_ms=300))) as test_client:
        answers = ask_at_once(test_client, bodies)
    assert [status for status, _ in answers] == [200, 200, 200, 422, 200, 200], answers
    assert answers[3][1]["error"] == {"message": "texts[0] is poison", "field": None}
    for (_, body), text in zip(answers[:3] + answers[4:], [*EN, *EN[:2]]):
        assert body["translations"] == model.translate([text], "en", "de")
    assert sum(calls) > 6 and calls.count(1) >= 6  # a shared call failed, then one call per request


def test_a_bug_is_a_json_500_and_other_requests_go_on(trained_model):
    model = load(trained_model, "cpu")

    def broken_translate(*args, **kwargs):
        raise RuntimeError("broken on purpose")

    model.translate = broken_translate
    with TestClient(build_app(model), raise_server_exceptions=False) as test_client:
        response = test_client.post("/translate", json=TRANSLATE)
        assert response.status_code == 500
        assert "RuntimeError: broken on purpose" in response.json()["error"]["message"]
        assert test_client.post("/embed", json=EMBED).status_code == 200  # the batcher carries on


# --- dynamic batching ------------------------------------------------------------------------------


class CountingModel:
    """Counts the texts of every model call the batcher makes, and which thread made it."""

    def __init__(self, model: Model):
        self.calls: list[tuple[str, int]] = []
        self.threads: set[int] = set()
        for name in ("translate", "encode"):
            setattr(model, name, self._counted(name, getattr(model, name)))

    def _counted(self, name, method):
        def counted(texts, *args, **kwargs):
            self.calls.append((name, len(texts)))
            self.threads.add(threading.get_ident())
            return method(texts, *args, **kwargs)
        return counted


def test_concurrent_requests_share_model_calls_and_get_their_own_answers(trained_model):
    model = load(trained_model, "cpu")
    reference = load(trained_model, "cpu")
    counting = CountingModel(model)
    # Sentences the tiny model was trained on, and invented ones on which it runs away to its length
    # limit: each sentence has its own limit, so no answer depends on its batch-mates.
    with gzip.open(MULTI30K / "train.en.gz", "rt", encoding="utf-8") as lines:
        sentences = [next(lines).strip() for _ in range(20)]
    sentences += ["zebra quantum violin", "purple seven umbrellas argue loudly about the moon tonight",
                  "x", "snow snow snow snow snow snow snow snow snow snow snow snow"]
    requests = [sentences[i:i + 1 + i % 2] for i in range(16)]  # one or two different sentences each
    start = threading.Barrier(len(requests))
    answers: dict[int, dict] = {}
    # A long wait for companions makes the gathering certain on a busy machine.
    with TestClient(build_app(model, ServiceLimits(max_wait_ms=300))) as test_client:
        def ask(i: int) -> None:
            start.wait()
            answers[i] = test_client.post("/translate", json={**TRANSLATE, "texts": requests[i]}).json()

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(requests))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    for i, texts in enumerate(requests):
        assert answers[i]["translations"] == reference.translate(texts, "en", "de"), f"request {i}"
    assert sum(n for _, n in counting.calls) == sum(len(t) for t in requests)
    assert len(counting.calls) < len(requests) / 2, counting.calls
    assert len(counting.threads) == 1 and threading.get_ident() not in counting.threads  # one worker thread


def run_async(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 30))


class FakeModelCall:
    """A batcher `run_batch` that records its calls (key, texts, thread) and upper-cases the texts."""

    def __init__(self, fail_for: str | None = None, seconds: float = 0.0):
        self.calls: list[tuple[str, list[str]]] = []
        self.threads: set[int] = set()
        self.active = 0
        self.most_active = 0
        self.fail_for = fail_for
        self.seconds = seconds

    def __call__(self, key: str, texts: list[str]) -> list[str]:
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        try:
            self.calls.append((key, list(texts)))
            self.threads.add(threading.get_ident())
            time.sleep(self.seconds)
            if key == self.fail_for:
                raise ValueError(f"cannot run {key}")
            return [f"{key}:{text.upper()}" for text in texts]
        finally:
            self.active -= 1


def test_batcher_gathers_requests_with_the_same_key():
    run = FakeModelCall()

    async def scenario():
        async with DynamicBatcher(run, max_wait_ms=100) as batcher:
            asks = [batcher.submit("a", [f"x{i}", f"y{i}"]) for i in range(6)] + [batcher.submit("b", ["z"])]
            return await asyncio.gather(*asks)

    answers = run_async(scenario())
    assert answers[:6] == [[f"a:X{i}", f"a:Y{i}"] for i in range(6)] and answers[6] == ["b:Z"]
    assert sorted((key, len(texts)) for key, texts in run.calls) == [("a", 12), ("b", 1)]
    assert threading.get_ident() not in run.threads


def test_batcher_caps_batch_size_and_never_splits_a_request():
    run = FakeModelCall()

    async def scenario():
        async with DynamicBatcher(run, max_wait_ms=100, max_batch_texts=6) as batcher:
            return await asyncio.gather(*[batcher.submit("a", [f"{i}"] * 3) for i in range(5)],
                                        batcher.submit("big", ["t"] * 8))

    answers = run_async(scenario())
    assert answers[:5] == [[f"a:{i}"] * 3 for i in range(5)] and answers[5] == ["big:T"] * 8
    assert sorted(len(texts) for _, texts in run.calls) == [3, 6, 6, 8]


def test_batcher_does_not_wait_past_max_wait():
    run = FakeModelCall()

    async def scenario():
        async with DynamicBatcher(run, max_wait_ms=10) as batcher:
            first = asyncio.ensure_future(batcher.submit("a", ["early"]))
            await asyncio.sleep(0.3)
            assert first.done()  # answered without companions
            return await first, await batcher.submit("a", ["late"])

    assert run_async(scenario()) == (["a:EARLY"], ["a:LATE"])
    assert [texts for _, texts in run.calls] == [["early"], ["late"]]


def test_batcher_error_goes_to_its_own_batch_only():
    run = FakeModelCall(fail_for="bad")

    async def scenario():
        async with DynamicBatcher(run, max_wait_ms=50) as batcher:
            return await asyncio.gather(batcher.submit("bad", ["1"]), batcher.submit("bad", ["2"]),
                                        batcher.submit("good", ["3"]), return_exceptions=True)

    bad_1, bad_2, good = run_async(scenario())
    assert isinstance(bad_1, ValueError) and isinstance(bad_2, ValueError) and "cannot run bad" in str(bad_1)
    assert good == ["good:3"]


def test_batcher_isolates_the_request_at_fault_in_a_shared_call():
    def run(key: str, texts: list[str]) -> list[str]:
        if "bad" in texts:
            raise ValueError("cannot run bad")
        return [text.upper() for text in texts]

    async def scenario():
        async with DynamicBatcher(run, max_wait_ms=100) as batcher:
            asks = [batcher.submit("a", [f"ok{i}"]) for i in range(3)] + [batcher.submit("a", ["x", "bad"])] + \
                   [batcher.submit("a", [f"ok{i}"]) for i in range(3, 5)]
            return await asyncio.gather(*asks, return_exceptions=True)

    answers = run_async(scenario())
    assert isinstance(answers[3], ValueError)
    assert answers[:3] + answers[4:] == [[f"OK{i}"] for i in range(5)]


def test_batcher_runs_one_model_call_at_a_time_and_drains_on_stop():
    run = FakeModelCall(seconds=0.05)

    async def scenario():
        batcher = DynamicBatcher(run, max_wait_ms=0)
        batcher.start()
        queued = [asyncio.ensure_future(batcher.submit(f"key{i}", [str(i)])) for i in range(5)]
        await asyncio.sleep(0)  # the requests are queued, none answered yet
        await batcher.drain()
        assert all(task.done() for task in queued)  # drained: everything queued was answered
        with pytest.raises(BatcherClosed):
            await batcher.submit("key0", ["late"])
        return [task.result() for task in queued]

    assert run_async(scenario()) == [[f"key{i}:{i}"] for i in range(5)]
    assert run.most_active == 1 and len(run.threads) == 1


# --- the command and the real server ---------------------------------------------------------------


def test_serve_with_a_missing_or_corrupt_checkpoint_is_a_one_line_error(tmp_path, capsys):
    assert main(["serve", "--model", str(tmp_path / "missing.pt")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"error: checkpoint not found: {tmp_path / 'missing.pt'}"]
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"not a checkpoint")
    assert main(["serve", "--model", str(corrupt)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "corrupt" in err[0]


def test_serve_on_a_busy_port_is_a_one_line_error(trained_model, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["serve", "--model", str(trained_model), "--port", str(port)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"error: cannot listen on 127.0.0.1:{port}")


# The real `interlingua serve` (cli.main) in a subprocess, with each translation slowed down so that a
# request is sure to be in flight when SIGTERM arrives; every model call is noted in a file.
SLOW_SERVER = """
import os, sys, time
from interlingua.inference.api import Model
translate = Model.translate
def slow_translate(self, texts, *args, **kwargs):
    with open(os.environ["MODEL_CALLS_FILE"], "a") as calls:
        calls.write("call\\n")
    time.sleep(float(os.environ["MODEL_CALL_SECONDS"]))
    return translate(self, texts, *args, **kwargs)
Model.translate = slow_translate
from interlingua.cli import main
sys.exit(main(sys.argv[1:]))
"""


def wait_for(condition, seconds: float, what: str, process: subprocess.Popen, log: Path):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if process.poll() is not None:
            pytest.fail(f"the server exited ({process.returncode}) before {what}:\n{log.read_text()}")
        time.sleep(0.05)
    pytest.fail(f"no {what} after {seconds} s:\n{log.read_text()}")


def start_server(argv: list[str], log: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """A real server process (`argv` after the interpreter, `--port 0`), its output in `log`; waits for
    the line that names the port and returns the process and its base URL."""
    with log.open("wb") as log_file:
        server = subprocess.Popen([sys.executable, *argv, "--port", "0", "--threads", "1"], cwd=REPO, env=env,
                                  stdout=log_file, stderr=subprocess.STDOUT)
    try:
        port = int(wait_for(lambda: re.search(r"on http://127\.0\.0\.1:(\d+) ", log.read_text()), 60,
                            "serving line", server, log).group(1))
    except BaseException:
        server.kill()
        server.wait()
        raise
    return server, f"http://127.0.0.1:{port}"


def http_json(url: str, body: dict | None = None, timeout: float = 30.0) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_real_server_answers_and_finishes_the_request_in_flight_on_sigterm(trained_model, model, tmp_path):
    log, calls = tmp_path / "server.log", tmp_path / "model_calls"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MODEL_CALLS_FILE": str(calls), "MODEL_CALL_SECONDS": "1.0"}
    server, base = start_server(["-c", SLOW_SERVER, "serve", "--model", str(trained_model)], log, env)
    try:
        def healthy() -> bool:
            try:
                return http_json(f"{base}/health", timeout=2)[0] == 200
            except OSError:
                return False

        wait_for(healthy, 30, "answer from /health", server, log)
        status, body = http_json(f"{base}/translate", {"texts": EN[:1], "src": "en", "tgt": "de"})
        assert (status, body["translations"]) == (200, model.translate(EN[:1], "en", "de"))

        in_flight: dict[str, tuple[int, dict]] = {}
        asker = threading.Thread(target=lambda: in_flight.setdefault(
            "answer", http_json(f"{base}/translate", {"texts": DE[:2], "src": "de", "tgt": "en"})))
        asker.start()
        wait_for(lambda: calls.is_file() and len(calls.read_text().splitlines()) == 2, 30,
                 "second model call", server, log)
        server.send_signal(signal.SIGTERM)  # while the model is translating the second request
        asker.join(30)
        assert server.wait(30) == 0, log.read_text()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert in_flight["answer"] == (200, {"translations": model.translate(DE[:2], "de", "en"), "src": "de",
                                         "tgt": "en", "pivot": None, "route": "supervised",
                                         "direction": "supervised"})
    text = log.read_text()
    assert "stopped on SIGTERM" in text and "Traceback" not in text
    with pytest.raises(OSError):  # nothing listens any more
        http_json(f"{base}/health", timeout=2)


def test_listening_socket_says_it_is_tcp():
    """asyncio sets TCP_NODELAY on accepted connections only when the socket's protocol is TCP;
    without it a keep-alive response after the first waits ~40 ms for a delayed ACK."""
    from interlingua.serving.server import listening_socket
    sock = listening_socket("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
    finally:
        sock.close()
