"""Greedy and beam search with the tails of batches decoded together (`modules.search`'s `_merging_tails`):
every sentence gets the tokens (and beam search's finished hypotheses) its own batch gives it, for the
Transformer (rows joined at different positions, attending over front padding) and the LSTM decoders
(memories of other lengths joined); a joined state's step is each state's own step; and `Model.translate`
gives the same text in one stream of batches or in several side by side.

Tiny random models, no training: they rarely stop, so sentences run to limits of their own, which makes the
tails. The equality of whole test-set translations and the speed are measured in docs/results/speed.md."""
from __future__ import annotations

import gzip

import pytest
import torch
from conftest import MULTI30K
from test_decoding import tiny_model
from test_transformer import VOCAB, model

from interlingua import load
from interlingua.data.vocab import BOS
from interlingua.modules.search import (
    beam_search_merging_tails,
    beam_search_nbest,
    greedy_search,
    greedy_search_merging_tails,
    joinable,
)

SENTENCES = 22


def _batches(net, sizes: list[int], seed: int = 3):
    """Batches of random sources (lengths 1-9) with each sentence's own output limit (2-13)."""
    gen = torch.Generator().manual_seed(seed)
    batches, key = [], 0
    for size in sizes:
        lengths = torch.randint(1, 10, (size,), generator=gen).sort(descending=True).values
        src = torch.randint(4, VOCAB, (size, int(lengths.max())), generator=gen)
        src[torch.arange(src.size(1))[None, :] >= lengths[:, None]] = 0
        limits = torch.randint(2, 14, (size,), generator=gen)
        batches.append((list(range(key, key + size)), net.run_encoder(src, lengths, "en"), limits))
        key += size
    return batches


NETWORKS = {
    "transformer": lambda: model(seed=4),
    "transformer-post-learned-none": lambda: model(decoder={"norm": "post", "positions": "learned"}, bridge="none",
                                                   seed=5),
    "lstm-attention-bridge": lambda: tiny_model("attention", input_feed=False, seed=6, vocab=VOCAB),
    "lstm-feed-no-bridge": lambda: tiny_model("none", input_feed=True, seed=7, vocab=VOCAB),
}


@pytest.mark.parametrize("name", list(NETWORKS))
@pytest.mark.parametrize("capacity", [1, 4, 8])
@torch.inference_mode()
def test_each_sentence_gets_what_its_own_batch_gives(name, capacity):
    sizes = {1: [1] * 6, 4: [4, 4, 3, 4, 2, 4], 8: [8, 8, 7, 8]}[capacity]
    net = NETWORKS[name]()
    batches = _batches(net, sizes)
    expected = {}
    for keys, bridged, limits in batches:
        decoder, state = net.start_decoding(bridged, "de")
        assert joinable(state)
        for key, ids in zip(keys, greedy_search(decoder, state, limits, BOS)):
            expected[key] = ids
    decoder = net.start_decoding(batches[0][1], "de")[0]
    groups = ((keys, net.start_decoding(bridged, "de")[1], limits) for keys, bridged, limits in batches)
    got = dict(greedy_search_merging_tails(decoder, groups, capacity, BOS))
    assert got == expected
    assert len({len(ids) for ids in got.values()}) > 3  # sentences did end at different steps


@pytest.mark.parametrize("name", list(NETWORKS))
@pytest.mark.parametrize("stop", ["all", "top"])
@torch.inference_mode()
def test_beam_search_gives_each_sentence_what_its_own_batch_gives(name, stop):
    """Beam 3 with tails joined (rows of sentences at different steps, each with its beams): every sentence's
    finished hypotheses and their scores as in its own batch."""
    net = NETWORKS[name]()
    batches = _batches(net, [4, 4, 3, 4, 2, 4], seed=11)
    expected = {}
    for keys, bridged, limits in batches:
        decoder, state = net.start_decoding(bridged, "de")
        for key, nbest in zip(keys, beam_search_nbest(decoder, state, limits, 3, 1.0, BOS, stop)):
            expected[key] = nbest
    decoder = net.start_decoding(batches[0][1], "de")[0]
    groups = ((keys, net.start_decoding(bridged, "de")[1], limits) for keys, bridged, limits in batches)
    got = dict(beam_search_merging_tails(decoder, groups, 4, 3, 1.0, BOS, stop))
    assert got.keys() == expected.keys()
    for key, nbest in expected.items():
        assert [ids for _, ids in got[key]] == [ids for _, ids in nbest], key
        assert [score for score, _ in got[key]] == pytest.approx([score for score, _ in nbest], rel=1e-5, abs=1e-6)


@torch.inference_mode()
def test_a_joined_transformer_state_steps_as_each_state_alone():
    """Two states three and zero steps in: one step of the joined state gives each row what its own state gives,
    and selecting the younger rows alone leaves the padding behind."""
    net = model(seed=8)
    (_, first, _), (_, second, _) = _batches(net, [3, 2], seed=9)
    decoder, old = net.start_decoding(first, "de")
    for token in (5, 9, 11):
        _, old = decoder.step(torch.full((3,), token), old)
    young = net.start_decoding(second, "de")[1]
    joined = old.join(young)
    assert joined.batch_size == 5 and joined.position == 3 and joined.pad.tolist() == [0, 0, 0, 3, 3]
    prev = torch.tensor([7, 8, 9, BOS, BOS])
    together, after = decoder.step(prev, joined)
    alone_old, _ = decoder.step(prev[:3], old)
    alone_young, young_after = decoder.step(prev[3:], young)
    torch.testing.assert_close(together, torch.cat([alone_old, alone_young]), rtol=1e-5, atol=1e-5)
    younger = after.select(torch.tensor([3, 4]))
    assert younger.pad is None and younger.position == 1 == young_after.position
    torch.testing.assert_close(decoder.step(torch.tensor([6, 6]), younger)[0],
                               decoder.step(torch.tensor([6, 6]), young_after)[0], rtol=1e-5, atol=1e-5)


def test_translate_gives_the_same_text_in_one_stream_of_batches_or_several(trained_model):
    """One worker merges the tails of all batches; two and three split the batches into streams decoded side by
    side in threads, each merging its own tails; `generate` over a kept representation as `translate`: the same
    output, line for line, greedy and beam 4."""
    with gzip.open(MULTI30K / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as lines:
        texts = [next(lines).strip() for _ in range(40)]
    loaded = load(trained_model)
    for beam in (1, 4):
        merged = loaded.translate(texts, "en", "de", beam=beam, batch_size=6, max_len=30)
        for workers in (2, 3):
            assert merged == loaded.translate(texts, "en", "de", beam=beam, batch_size=6, max_len=30, workers=workers)
        assert merged == loaded.generate(loaded.represent(texts, "en", batch_size=6), "de", beam=beam, batch_size=6,
                                         max_len=30)
