"""The decoding step's fast paths give what the plain operations give: the search's choices by blocks
(`modules.candidates`); greedy search's unnormalised scores (`step_scores`) for every decoder kind and wrapper;
the Transformer's eval step, the layers' forward without the module calls; and the Transformer's cached steps
stay each state's own (a state stepped twice, rows chosen again), which a cache written in place would have to
keep.

Tiny random models, no training; the equality of whole translations before and after is measured on the test
set (docs/results/speed.md).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from test_decoding import tiny_model
from test_transformer import model, padded_batch

from interlingua.modules.candidates import argmax_rows, best_candidates
from interlingua.modules.search import greedy_search
from interlingua.modules.shortlist_decoding import START_POSITION, ShortlistDecoder


@pytest.mark.parametrize("vocab", [8000, 8003, 50, 129])
def test_block_choices_equal_argmax_and_topk(vocab):
    gen = torch.Generator().manual_seed(vocab)
    logp = torch.log_softmax(torch.randn(12, vocab, generator=gen) * 3, dim=-1)
    logp[2, : vocab // 2] = float("-inf")  # a restricted row
    logp[3] = logp[3].max()  # a row of ties: the first index wins, as argmax says
    logp[4, -1] = logp[4].max() + 1  # the best value in the short last block
    assert torch.equal(argmax_rows(logp), logp.argmax(-1))
    logp[3] = torch.log_softmax(torch.randn(vocab, generator=gen), dim=-1)  # among equal candidates either may win
    for width in (1, 3):
        scores = torch.randn(12 // width, width, generator=gen)
        scores[0, -1] = float("-inf")  # a beam with nothing finite left
        k = min(10, width * vocab)
        expected = (scores.unsqueeze(-1) + logp.view(12 // width, width, vocab)).view(12 // width, -1).topk(k, dim=1)
        values, indices = best_candidates(scores, logp, k)
        assert torch.equal(values, expected.values)
        finite = torch.isfinite(values)  # which of several -inf candidates is taken is either's choice
        assert torch.equal(indices[finite], expected.indices[finite])


def _decoder_after(net, steps: list[int]):
    src, lengths = padded_batch()
    decoder, state = net.start_decoding(net.run_encoder(src, lengths, "en"), "de")
    for token in steps:
        _, state = decoder.step(torch.full((src.size(0),), token), state)
    return decoder, state


@torch.inference_mode()
def test_a_state_stepped_twice_continues_each_prefix():
    """Two continuations of one state (5 then 7, and 6): the second does not change what the first reads."""
    net = model(seed=5)
    decoder, state = _decoder_after(net, [4, 9, 11])
    rows = state.batch_size
    _, after_5 = decoder.step(torch.full((rows,), 5), state)
    decoder.step(torch.full((rows,), 6), state)  # the same state stepped again, another token
    continued, _ = decoder.step(torch.full((rows,), 7), after_5)
    fresh_decoder, fresh = _decoder_after(net, [4, 9, 11, 5])
    expected, _ = fresh_decoder.step(torch.full((rows,), 7), fresh)
    assert torch.equal(continued, expected)


@torch.inference_mode()
def test_reordered_rows_keep_their_own_cache():
    """Rows chosen again after some steps (one twice, one left out) decode as the same rows would unmoved."""
    net = model(seed=6)
    decoder, state = _decoder_after(net, [4, 9])
    order = torch.tensor([3, 3, 0, 1])
    moved, _ = decoder.step(torch.full((4,), 8), state.select(order))
    plain, _ = decoder.step(torch.full((4,), 8), state)
    assert torch.equal(moved, plain[order])


class StepOnly:
    """A decoder as the search saw one before `step_scores`: log-probabilities only."""

    def __init__(self, inner):
        self.inner = inner

    def parameters(self):
        return self.inner.parameters()

    def step(self, prev, state):
        return self.inner.step(prev, state)


def _networks():
    """One network per decoder kind: the LSTM with and without the bridge, the Transformer pre- and post-norm."""
    return {"lstm": tiny_model("attention", False, seed=2, vocab=40, init=0.8),
            "lstm-feed-no-bridge": tiny_model("none", True, seed=3, vocab=40, init=0.8),
            "transformer": model(seed=4), "transformer-post": model(decoder={"norm": "post"}, seed=5)}


@pytest.mark.parametrize("kind", ["lstm", "lstm-feed-no-bridge", "transformer", "transformer-post"])
@pytest.mark.parametrize("wrapper", ["none", "restricted", "shortlist"])
@torch.inference_mode()
def test_greedy_search_on_unnormalised_scores_is_greedy_search_on_log_probabilities(kind, wrapper):
    net = _networks()[kind]
    size = net.decoder_for("de").generator.out_features
    if wrapper == "restricted":
        net.restrict_outputs({"de": [(0, size - 7)]})
    src, lengths = padded_batch()
    src = src.clamp(max=size - 1)
    decoder, state = net.start_decoding(net.run_encoder(src, lengths, "en"), "de")
    start = 1
    if wrapper == "shortlist":
        rng = np.random.default_rng(0)
        decoder = ShortlistDecoder(decoder, [rng.choice(size, 9, replace=False) for _ in range(4)], start)
        state, start = decoder.wrap(state), START_POSITION
    prev = torch.full((4,), start)
    scores, _ = decoder.step_scores(prev, state)
    logp, _ = decoder.step(prev, state)
    assert torch.equal(argmax_rows(scores), logp.argmax(-1))
    if wrapper == "restricted":
        assert torch.isinf(scores[:, size - 7:]).all()
    else:
        assert torch.equal(torch.log_softmax(scores.float(), dim=-1), logp)
    assert greedy_search(decoder, state, 15, start) == greedy_search(StepOnly(decoder), state, 15, start)


@pytest.mark.parametrize("settings", [
    pytest.param({}, id="pre-sinusoidal"),
    pytest.param({"norm": "post", "positions": "learned"}, id="post-learned"),
])
@torch.inference_mode()
def test_the_eval_step_is_the_layers_own_forward(settings):
    """The Transformer decoder's step in eval mode (`DecoderLayer.step`) gives, bit for bit, what its layers'
    forward gives (the path training takes; here without dropout), for one row per sentence and for beams."""
    net = model(decoder=settings, dropout=0.0, seed=7)
    src, lengths = padded_batch()
    decoder, state = net.start_decoding(net.run_encoder(src, lengths, "en"), "de")

    def both(tokens, state):
        fast = decoder.step_states(tokens, state)
        decoder.train()
        try:
            plain = decoder.step_states(tokens, state)
        finally:
            decoder.eval()
        assert torch.equal(fast[0], plain[0])
        for ours, theirs in zip(fast[1].caches, plain[1].caches):
            assert torch.equal(ours.keys, theirs.keys) and torch.equal(ours.values, theirs.values)
        return fast[1]

    for token in (1, 9, 11):
        state = both(torch.full((4,), token), state)
    beams = state.expand_beams(torch.arange(4).repeat_interleave(3))  # 3 rows per sentence, one memory each
    for token in (5, 6):
        beams = both(torch.arange(12) % 7 + token, beams)
