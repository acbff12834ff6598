"""The web page of `interlingua serve` and the endpoints it draws from: GET / and its script and style
sheet (shipped in the package, nothing from elsewhere, a label for every control), GET /directions and
/model, POST /attention and /similarity answer what the library answers, and bad requests are 4xx
errors naming the field. The page in a real browser: scripts/browser-test.sh (not part of this suite).

Tiny random models, no training.
"""
from __future__ import annotations

import os
import re
import warnings
from html.parser import HTMLParser

import numpy as np
import pytest

with warnings.catch_warnings():  # as in test_serve.py: newer Starlette prefers httpx2 for its test client
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

from conftest import REPO
from test_attention_maps import bridge_model, bridge_path, transformer_none  # noqa: F401 (fixtures)
from test_serve import http_json, start_server, wait_for

import interlingua
from interlingua.evaluation.cosine import cosine_matrix
from interlingua.serving.app import build_app
from interlingua.serving.limits import ServiceLimits

SENTENCE = "a dog runs in the park ."


@pytest.fixture(scope="module")
def client(bridge_model):
    with TestClient(build_app(bridge_model)) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def transformer_client(transformer_none):
    with TestClient(build_app(transformer_none)) as test_client:
        yield test_client


# --- the page and its files ----------------------------------------------------------------------------


class Controls(HTMLParser):
    """The form controls of a page, the `for` of its labels, and every URL it loads."""

    def __init__(self):
        super().__init__()
        self.controls: dict[str, str] = {}
        self.labelled: set[str] = set()
        self.loads: list[str] = []
        self.live: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("input", "select", "textarea"):
            self.controls[a.get("id", "")] = tag
        if tag == "label" and "for" in a:
            self.labelled.add(a["for"])
        if tag in ("script", "img") and "src" in a:
            self.loads.append(a["src"])
        if tag == "link":
            self.loads.append(a.get("href", ""))
        if "aria-live" in a:
            self.live.append(a.get("id", ""))


def test_the_page_has_every_control_each_with_a_label(client):
    response = client.get("/")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    page = Controls()
    page.feed(response.text)
    assert {"source-text": "textarea", "source-lang": "select", "beam": "select", "show-pivot": "input",
            "layer": "select"}.items() <= page.controls.items()
    assert "" not in page.controls and set(page.controls) <= page.labelled  # every control has a <label for=...>
    for section in ("translate", "bridge", "across"):
        assert f'<section id="{section}"' in response.text
    for button in ("translate-button", "add-row", "compare-button", "use-translations"):
        assert f'id="{button}"' in response.text
    assert {"translate-messages", "bridge-messages", "similarity-messages", "page-messages"} <= set(page.live)
    # Nothing from elsewhere: the page loads its own two files (the icon is an empty data: URL, so the
    # browser asks for no /favicon.ico), and its policy allows this origin only.
    assert sorted(page.loads) == ["data:,", "page/page.css", "page/page.js"]
    policy = response.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "http" not in policy


def test_the_script_and_style_sheet_are_served_from_the_package(client):
    script = client.get("/page/page.js")
    style = client.get("/page/page.css")
    assert script.status_code == style.status_code == 200
    assert "javascript" in script.headers["content-type"] and style.headers["content-type"].startswith("text/css")
    for text in (script.text, style.text):
        assert not re.search(r"https?://|@import|url\(", text)  # no fonts, scripts or images fetched at run time
    assert client.get("/page/missing.js").json() == {"error": {"message": "Not Found", "field": None}}


def test_every_endpoint_the_script_calls_exists(client):
    script = client.get("/page/page.js").text
    called = set(re.findall(r'\bcall\("([a-z/]+)"', script))
    assert called == {"model", "directions", "translate", "attention", "similarity"}
    paths = set(client.get("/openapi.json").json()["paths"])
    assert {f"/{name}" for name in called} <= paths
    assert "/" not in paths  # the page is no API endpoint


def test_the_page_ships_as_package_data():
    pyproject = (REPO / "pyproject.toml").read_text()
    for pattern in ("serving/page/*.html", "serving/page/*.js", "serving/page/*.css"):
        assert f'"{pattern}"' in pyproject


# --- GET /directions, GET /model ----------------------------------------------------------------------------


def test_directions_are_marked_supervised_or_zero_shot_with_their_pivot(client, bridge_model):
    directions = client.get("/directions").json()["directions"]
    langs = bridge_model.languages
    assert {(d["src"], d["tgt"]) for d in directions} == {(s, t) for s in langs.sources for t in langs.targets
                                                          if s != t}
    by_pair = {(d["src"], d["tgt"]): (d["route"], d["pivot"]) for d in directions}
    assert all(d["kind"] == d["route"] for d in directions)  # the deprecated name still answers
    assert by_pair[("en", "de")] == ("supervised", None) and by_pair[("fr", "en")] == ("supervised", None)
    assert by_pair[("de", "fr")] == ("zero-shot", "en") and by_pair[("fr", "de")] == ("zero-shot", "en")
    # What /translate calls each direction agrees.
    for (src, tgt), (route, _) in by_pair.items():
        answer = client.post("/translate", json={"texts": ["a"], "src": src, "tgt": tgt}).json()
        assert answer["route"] == answer["direction"] == route


# --- POST /translate into every target (what the page's Translate button asks) ------------------------------


@pytest.mark.parametrize("beam", [1, 3])
def test_every_target_and_the_zero_shot_ones_through_their_pivot(client, bridge_model, beam):
    """The page's two requests for a German sentence: every other target at once, and the zero-shot
    target (fr) through its pivot (en); each result is what a request for that target alone answers."""
    texts = [SENTENCE, "", "ein kind sitzt ."]
    for tgts, pivot in ((["en", "fr"], None), (["fr"], "en"), (["fr", "en", "de"], "en")):
        body = {"texts": texts, "src": "de", "beam": beam, "pivot": pivot}
        answer = client.post("/translate", json={**body, "tgts": tgts}).json()
        singles = [client.post("/translate", json={**body, "tgt": tgt}).json() for tgt in tgts]
        assert answer == {"src": "de", "results": singles}
        for tgt, result in zip(tgts, answer["results"]):
            assert result["translations"] == bridge_model.translate(texts, "de", tgt, beam=beam, pivot=pivot)
            through = pivot not in (None, "de", tgt)
            assert (result["pivot"], result["route"]) == ((pivot, "pivot") if through else
                                                          (None, bridge_model.languages.route("de", tgt)))


def test_every_target_of_a_model_that_encodes_for_one_target(tmp_path):
    """A model with the target's tag before the source encodes the texts once per target."""
    from test_represent import TRANSFORMER, shared_checkpoint
    model = interlingua.load(shared_checkpoint(tmp_path / "prefixed.pt", tag_position="source_prefix",
                                               **TRANSFORMER), "cpu")
    texts = [SENTENCE, "", "a child sits ."]
    with TestClient(build_app(model)) as prefixed:
        answer = prefixed.post("/translate", json={"texts": texts, "src": "en", "tgts": ["de", "fr", "en"],
                                                   "beam": 2}).json()
    assert [r["translations"] for r in answer["results"]] == [model.translate(texts, "en", tgt, beam=2)
                                                              for tgt in ("de", "fr", "en")]


def test_model_says_what_attention_it_has(client, transformer_client, bridge_model):
    info = client.get("/model").json()
    assert info["languages"] == ["de", "en", "fr"] and info["encoder"] == "bilstm" and info["bridge"] == "attention"
    assert info["heads"] == bridge_model.heads and info["bridge_attention"] is True
    assert info["self_attention_layers"] == 0 and (info["max_texts"], info["max_chars"]) == (64, 2000)
    info = transformer_client.get("/model").json()
    assert (info["encoder"], info["bridge"], info["heads"]) == ("transformer", "none", None)
    assert info["bridge_attention"] is False and info["self_attention_layers"] == 2


# --- POST /attention ------------------------------------------------------------------------------------------


def test_attention_of_the_bridge_heads(client, bridge_model):
    response = client.post("/attention", json={"text": SENTENCE, "lang": "en"})
    assert response.status_code == 200, response.text
    body = response.json()
    bridge = np.asarray(body["bridge"])
    assert bridge.shape == (bridge_model.heads, len(body["tokens"]))  # heads x subwords
    np.testing.assert_allclose(bridge.sum(1), 1.0, atol=1e-4)
    maps = bridge_model.attention_maps([SENTENCE], "en")[0]
    assert body["tokens"] == maps.tokens
    np.testing.assert_allclose(bridge, maps.bridge, atol=1e-5)
    assert (body["self_attention"], body["layer"], body["layers"]) == (None, None, 0)


@pytest.mark.parametrize("layer", [None, 1, 2])
def test_attention_of_a_transformer_layer(transformer_client, transformer_none, layer):
    body = {"text": SENTENCE, "lang": "de"} | ({} if layer is None else {"layer": layer})
    response = transformer_client.post("/attention", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    n = len(answer["tokens"])
    weights = np.asarray(answer["self_attention"])
    assert answer["bridge"] is None and (answer["layer"], answer["layers"]) == (layer or 2, 2)
    assert weights.shape == (2, n, n)  # heads x subwords x subwords
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-4)
    maps = transformer_none.attention_maps([SENTENCE], "de")[0]
    assert answer["tokens"] == maps.tokens
    np.testing.assert_allclose(weights, maps.self_attention[(layer or 2) - 1], atol=1e-5)


# --- POST /similarity -----------------------------------------------------------------------------------------


def test_similarity_is_the_cosine_of_each_texts_own_vector(client, bridge_model):
    texts = [SENTENCE, "ein hund rennt im park .", "un chien court dans le parc .", "the woman eats ."]
    langs = ["en", "de", "fr", "en"]
    response = client.post("/similarity", json={"texts": texts, "langs": langs})
    assert response.status_code == 200, response.text
    matrix = np.asarray(response.json()["similarity"])
    assert matrix.shape == (4, 4) and response.json()["langs"] == langs
    np.testing.assert_allclose(matrix, matrix.T, atol=1e-6)
    np.testing.assert_allclose(np.diag(matrix), 1.0, atol=1e-5)
    vectors = np.stack([bridge_model.encode([text], lang)[0] for text, lang in zip(texts, langs)])
    np.testing.assert_allclose(matrix, cosine_matrix(vectors, vectors), atol=1e-5)


# --- bad requests: 4xx naming the field --------------------------------------------------------------------------

ATTENTION = {"text": SENTENCE, "lang": "en"}
SIMILARITY = {"texts": [SENTENCE, "ein hund ."], "langs": ["en", "de"]}

BAD = [
    # (endpoint, body, status, field, words the message must contain)
    ("/attention", {**ATTENTION, "lang": "xx"}, 422, "body.lang", ["'xx'", "de, en, fr"]),
    ("/attention", {**ATTENTION, "text": ""}, 422, "body.text", ["empty"]),
    ("/attention", {**ATTENTION, "text": "   "}, 422, "body.text", ["empty"]),
    ("/attention", {**ATTENTION, "text": "x" * 2001}, 422, "body.text", ["2001", "2000"]),
    ("/attention", {**ATTENTION, "text": ["a"]}, 422, "body.text", ["string"]),
    ("/attention", {"lang": "en"}, 422, "body.text", ["required"]),
    ("/attention", {**ATTENTION, "layer": 1}, 422, "body.layer", ["no self-attention", "bilstm"]),
    ("/attention", {**ATTENTION, "layer": 0}, 422, "body.layer", ["greater than or equal to 1"]),
    ("/attention", {**ATTENTION, "layer": "2"}, 422, "body.layer", ["integer"]),
    ("/attention", {**ATTENTION, "heads": 2}, 422, "body.heads", ["unknown field"]),
    ("/similarity", {**SIMILARITY, "langs": ["en", "xx"]}, 422, "body.langs.1", ["'xx'", "de, en, fr"]),
    ("/similarity", {**SIMILARITY, "langs": ["en"]}, 422, "body.langs", ["1 languages for 2 texts"]),
    ("/similarity", {**SIMILARITY, "texts": [SENTENCE, ""]}, 422, "body.texts.1", ["text 1", "empty"]),
    ("/similarity", {**SIMILARITY, "texts": [SENTENCE, "y" * 2001]}, 422, "body.texts.1", ["2001", "2000"]),
    ("/similarity", {"texts": [], "langs": []}, 422, "body.texts", ["empty"]),
    ("/similarity", {"texts": ["a"] * 65, "langs": ["en"] * 65}, 422, "body.texts", ["65", "64"]),
    ("/similarity", {"texts": [SENTENCE]}, 422, "body.langs", ["required"]),
    ("/similarity", {**SIMILARITY, "texts": [SENTENCE, 3]}, 422, "body.texts.1", ["string"]),
]


@pytest.mark.parametrize("path, body, status, field, words", BAD,
                         ids=[f"{p}-{f}-{i}" for i, (p, _, _, f, _) in enumerate(BAD)])
def test_bad_request_names_the_field(client, path, body, status, field, words):
    response = client.post(path, json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["field"] == field
    for word in words:
        assert word in error["message"], error["message"]


def test_bad_layers_of_a_transformer_and_a_model_with_no_attention(transformer_client, tmp_path):
    response = transformer_client.post("/attention", json={"text": SENTENCE, "lang": "en", "layer": 3})
    assert response.status_code == 422
    assert response.json()["error"] == {"message": "layer 3: the encoder has 2 layers with self-attention (1 to 2)",
                                        "field": "body.layer"}
    from test_decoding import random_checkpoint
    plain = interlingua.load(random_checkpoint(tmp_path / "none.pt", bridge={"type": "none"}), "cpu")
    with TestClient(build_app(plain)) as plain_client:
        response = plain_client.post("/attention", json={"text": SENTENCE, "lang": "en"})
        assert response.status_code == 422 and "shows no attention" in response.json()["error"]["message"]
        assert plain_client.get("/").status_code == 200  # the page itself still opens
        assert plain_client.get("/model").json()["self_attention_layers"] == 0


def test_post_endpoints_want_json(client):
    response = client.post("/attention", content=b"text=a&lang=en",
                           headers={"content-type": "application/x-www-form-urlencoded"})
    assert response.status_code == 415 and response.json()["error"]["field"] == "header.content-type"


def test_the_limits_apply_to_the_new_endpoints(bridge_model):
    with TestClient(build_app(bridge_model, ServiceLimits(max_texts=2, max_chars=10))) as small:
        status = small.post("/similarity", json={"texts": ["a", "b", "c"], "langs": ["en"] * 3}).status_code
        assert status == 422
        error = small.post("/attention", json={"text": "x" * 11, "lang": "en"}).json()["error"]
        assert error["field"] == "body.text" and "at most 10" in error["message"]


# --- the real command ----------------------------------------------------------------------------------------------


def test_interlingua_serve_serves_the_page(bridge_path, tmp_path):
    """Through `interlingua serve` (the files found from the installed package, not a test client)."""
    log = tmp_path / "server.log"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    server, base = start_server(["-m", "interlingua.cli", "serve", "--model", str(bridge_path)], log, env)
    try:
        import urllib.request

        def fetch(path: str) -> tuple[int, str, str]:
            with urllib.request.urlopen(base + path, timeout=30) as response:
                return response.status, response.headers["content-type"], response.read().decode("utf-8")

        status, kind, html = wait_for(lambda: _try(fetch, "/"), 30, "page", server, log)
        assert status == 200 and kind.startswith("text/html") and 'id="translate-form"' in html
        assert fetch("/page/page.js")[0] == 200 and fetch("/page/page.css")[0] == 200
        status, body = http_json(f"{base}/attention", {"text": SENTENCE, "lang": "en"})
        assert status == 200 and len(body["bridge"]) == 4
    finally:
        server.terminate()
        server.wait(30)


def _try(fetch, path):
    try:
        return fetch(path)
    except OSError:
        return None
