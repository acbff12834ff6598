"""The bag-of-subwords reference: protocol shapes, meaningful similarities, save/load round trip."""
from __future__ import annotations

import numpy as np
import pytest
from test_sentence_eval_fakes import need_data

from interlingua.evaluation.sentence.baselines import BagOfSubwords, FunctionEmbedder, reference_embedders
from interlingua.evaluation.sentence.protocol import CachedEmbedder, EmbedderLike, EvaluationError
from interlingua.evaluation.sentence.retrieval import cosine_matrix


@pytest.fixture(scope="module")
def bow():
    root = need_data("multi30k").parent
    return BagOfSubwords.from_multi30k(root, ["en", "de"], max_lines=4000, vocab_size=1000, dim=50)


def test_protocol_and_shapes(bow):
    assert isinstance(bow, EmbedderLike) and bow.languages == ["de", "en"] and bow.dim == 50
    vecs = bow.encode(["A dog runs on the beach.", "", "A man plays a guitar."], "en")
    assert vecs.shape == (3, 50) and vecs.dtype == np.float32
    assert not vecs[1].any()  # nothing to average: zeros
    with pytest.raises(EvaluationError, match="only pooling='mean'"):
        bow.encode(["a"], "en", pooling="heads")
    with pytest.raises(EvaluationError, match="no 'fr'"):
        bow.encode(["a"], "fr")
    assert "no per-head output" in CachedEmbedder("bow", bow).heads_unavailable("en")


def test_similar_captions_are_closer_than_unrelated_ones(bow):
    v = bow.encode(["a dog runs across the grass .", "a dog is running on the grass .",
                    "two men play guitars on stage ."], "en")
    sim = cosine_matrix(v, v)
    assert sim[0, 1] > sim[0, 2] + 0.1


def test_save_load_round_trip_and_cache(bow, tmp_path):
    again = BagOfSubwords.load(bow.save(tmp_path / "bow"))
    s = ["Ein Hund rennt über die Wiese."]
    np.testing.assert_array_equal(again.encode(s, "de"), bow.encode(s, "de"))
    assert again.info["max_lines"] == 4000
    with pytest.raises(EvaluationError, match="no saved bag-of-subwords"):
        BagOfSubwords.load(tmp_path)
    root = need_data("multi30k").parent
    refs = reference_embedders(root, languages=["en"], cache_dir=tmp_path / "bow", max_lines=4000)
    assert refs["bow-subword"].languages == ["de", "en"]  # reused from the cache, not retrained


def test_function_embedder_wraps_any_callable():
    emb = FunctionEmbedder(lambda s, lang: np.ones((len(s), 3)), ["en"],
                           heads_fn=lambda s, lang: np.ones((len(s), 2, 3)))
    assert emb.encode(["a", "b"], "en").shape == (2, 3) and emb.encode(["a"], "en", pooling="heads").shape == (1, 2, 3)
    assert CachedEmbedder("f", emb).heads_unavailable("en") is None
    with pytest.raises(EvaluationError, match="no 'de'"):
        emb.encode(["a"], "de")
