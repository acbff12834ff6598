"""Head entropy (Table 13 split at the sentence length) and attention heat maps."""
from __future__ import annotations

import numpy as np
import pytest

from interlingua.evaluation.sentence.heads import (
    head_entropies,
    head_entropy_stats,
    plot_head_heatmap,
    plot_head_heatmaps,
    plot_per_head_accuracy,
)
from interlingua.evaluation.sentence.protocol import EvaluationError


def test_entropy_of_uniform_and_one_hot_heads():
    A = np.array([[0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0]])
    np.testing.assert_allclose(head_entropies(A), [np.log(4), 0.0], atol=1e-12)


def test_stats_split_heads_at_the_sentence_length():
    k = 5
    short = np.zeros((k, 2))  # 2 tokens: heads 1-2 focused, heads 3-5 uniform
    short[0, 0] = short[1, 1] = 1.0
    short[2:] = 0.5
    long = np.full((k, 6), 1 / 6)  # 6 tokens >= 5 heads: nothing beyond the length
    stats = head_entropy_stats([short, long])
    assert stats["heads"] == 5 and stats["sentences"] == 2
    assert stats["up_to_length"]["count"] == 2 + 5 and stats["beyond_length"]["count"] == 3
    assert stats["beyond_length"]["mean"] == pytest.approx(np.log(2))
    assert stats["up_to_length"]["mean"] == pytest.approx(5 * np.log(6) / 7)
    assert stats["all_heads"]["count"] == 10


def test_bad_attention_is_rejected():
    with pytest.raises(EvaluationError, match="sum to 1"):
        head_entropies(np.array([[0.5, 0.2]]))
    with pytest.raises(EvaluationError, match="non-negative"):
        head_entropies(np.array([[1.5, -0.5]]))
    with pytest.raises(EvaluationError, match="same number of heads"):
        head_entropy_stats([np.eye(2), np.full((3, 2), 0.5)])
    with pytest.raises(EvaluationError, match="3 token columns but 2 tokens"):
        plot_head_heatmap(np.full((2, 3), 1 / 3), ["a", "b"], "x.png")


def test_heat_maps_and_per_head_plot_are_written(tmp_path):
    rng = np.random.default_rng(0)
    tokens = ["▁a", "▁dog", "▁runs", "."]

    def att(k):
        A = rng.random((k, len(tokens)))
        return A / A.sum(axis=1, keepdims=True)

    one = plot_head_heatmap(att(4), tokens, tmp_path / "one.png", title="k=4")
    many = plot_head_heatmaps({"k=1": att(1), "k=10": att(10)}, tokens, tmp_path / "sub" / "many.png")
    heads = plot_per_head_accuracy({"Length": [50.0, 60.0, 55.0]}, tmp_path / "heads.png")
    for png in (one, many, heads):
        assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
