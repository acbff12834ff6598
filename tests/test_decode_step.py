"""The decoding step's fast paths give what the plain operations give: the search's choices by blocks
(`modules.candidates`); and the Transformer's cached steps stay each state's own (a state stepped twice, rows
chosen again), which a cache written in place would have to keep.

Tiny random models, no training; the equality of whole translations before and after is measured on the test
set (docs/results/speed.md).
"""
from __future__ import annotations

import pytest
import torch
from test_transformer import model, padded_batch

from interlingua.modules.candidates import argmax_rows, best_candidates


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
