import math

import pytest
import torch

from interlingua.config import ModelConfig
from interlingua.data.vocab import BOS, EOS
from interlingua.modules.decoders import DecoderState
from interlingua.modules.model import TranslationNetwork
from interlingua.modules.search import beam_search, beam_search_nbest, greedy_search


def model_and_state(seed=0, batch=4):
    torch.manual_seed(seed)
    cfg = ModelConfig.model_validate({"embed_dim": 16, "encoder": {"hidden": 16, "layers": 1},
                                      "bridge": {"heads": 3, "hidden": 8}, "decoder": {"hidden": 16, "layers": 1},
                                      "dropout": 0.0})
    model = TranslationNetwork(cfg, {"en": 12, "de": 12}, ["en"], ["de"]).eval()
    src = torch.randint(4, 12, (batch, 5))
    bridged = model.run_encoder(src, torch.tensor([5, 4, 3, 5][:batch]), "en")
    dec = model.decoder_for("de")
    return dec, dec.start_state(bridged.memory, bridged.memory_mask)


def sequence_logprob(dec, state, row, seq, finished=True):
    """log p(seq + EOS); for an unfinished sequence log p(seq), an upper bound of any completion."""
    st = state.select(torch.tensor([row]))
    prev, total = torch.tensor([BOS]), 0.0
    for tok in seq + ([EOS] if finished else []):
        logp, st = dec.step(prev, st)
        total += float(logp[0, tok])
        prev = torch.tensor([tok])
    return total


@torch.inference_mode()
def test_beam_one_equals_greedy():
    for seed in range(5):
        dec, state = model_and_state(seed)
        assert beam_search(dec, state, 12, beam_size=1) == greedy_search(dec, state, 12)


@torch.inference_mode()
def test_beam_finds_at_least_as_probable_translations():
    better = 0
    for seed in range(6):
        dec, state = model_and_state(seed)
        greedy = greedy_search(dec, state, 10)
        beam = beam_search(dec, state, 10, beam_size=5, length_penalty=0.0)
        for row in range(4):
            g = sequence_logprob(dec, state, row, greedy[row], finished=len(greedy[row]) < 10)
            if len(beam[row]) < 10:  # beam finished with EOS: it must not be worse than greedy
                b = sequence_logprob(dec, state, row, beam[row])
                assert b >= g - 1e-4
                better += b > g + 1e-4
    assert better > 0  # the search actually searches


@torch.inference_mode()
def test_max_len_is_respected():
    dec, state = model_and_state(1)
    assert all(len(h) <= 3 for h in greedy_search(dec, state, 3))
    assert all(len(h) <= 3 for h in beam_search(dec, state, 3, beam_size=3))


class BigramDecoder:
    """A decoder whose next-token distribution depends on the previous token only."""

    def __init__(self, table: dict[int, dict[int, float]], vocab: int = 8):
        self.logp = torch.full((vocab, vocab), float(torch.log(torch.tensor(1e-6))))
        for prev, row in table.items():
            rest = (1.0 - sum(row.values())) / (vocab - len(row))
            self.logp[prev] = torch.log(torch.tensor([row.get(t, rest) for t in range(vocab)]))

    def step(self, prev, state):
        return self.logp[prev], state


def bigram_state(batch=1):
    return DecoderState(torch.zeros(1, batch, 1), torch.zeros(1, batch, 1), None, torch.zeros(batch, 1, 1),
                        torch.zeros(batch, 1, 1), torch.ones(batch, 1, dtype=torch.bool))


A, B, C = 4, 5, 6
# a short sentence [C] (p = 0.5 * 0.99) against a longer, less probable one [A, B] (p = 0.45 * 0.9 * 0.99)
TABLE = {BOS: {C: 0.5, A: 0.45, EOS: 0.001}, C: {EOS: 0.99}, A: {B: 0.9, EOS: 0.001}, B: {EOS: 0.99}}


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0, 2.0])
def test_length_penalty_score_is_the_documented_formula(alpha):
    dec = BigramDecoder(TABLE)
    nbest = beam_search_nbest(dec, bigram_state(), 10, beam_size=2, length_penalty=alpha)[0]
    assert [h for _, h in nbest] and all(len(h) < 10 for _, h in nbest)
    for score, hyp in nbest:  # log p(hyp + </s>) / (len(hyp) + 1) ** alpha, by hand
        logp = sum(float(dec.logp[p, t]) for p, t in zip([BOS] + hyp, hyp + [EOS]))
        assert score == pytest.approx(logp / (len(hyp) + 1) ** alpha, rel=1e-5)
    assert {tuple(h) for _, h in nbest} == {(C,), (A, B)}
    assert [s for s, _ in nbest] == sorted((s for s, _ in nbest), reverse=True)


def test_length_penalty_changes_the_winner():
    dec = BigramDecoder(TABLE)
    short = math.log(0.5 * 0.99)  # -0.70: best by log-probability, 2 tokens with </s>
    long = math.log(0.45 * 0.9 * 0.99)  # -0.91, 3 tokens
    assert short > long and long / 3 > short / 2
    assert beam_search(dec, bigram_state(), 10, beam_size=2, length_penalty=0.0) == [[C]]
    assert beam_search(dec, bigram_state(), 10, beam_size=2, length_penalty=1.0) == [[A, B]]
    assert greedy_search(dec, bigram_state(), 10) == [[C]]  # greedy knows no length penalty


@torch.inference_mode()
def test_length_penalty_on_a_random_model_scores_and_picks_by_the_formula():
    changed = checked = 0
    for seed in range(3):
        dec, state = model_and_state(seed)
        winners = {}
        for alpha in (0.0, 1.0, 3.0):
            nbest = beam_search_nbest(dec, state, 10, beam_size=4, length_penalty=alpha)
            for row, hyps in enumerate(nbest):
                for score, hyp in hyps:
                    finished = len(hyp) < 10
                    length = len(hyp) + 1 if finished else len(hyp)
                    logp = sequence_logprob(dec, state, row, hyp, finished=finished)
                    assert score == pytest.approx(logp / length ** alpha, rel=1e-4, abs=1e-5)
                    checked += finished
            winners[alpha] = [hyps[0][1] for hyps in nbest]
            assert winners[alpha] == beam_search(dec, state, 10, beam_size=4, length_penalty=alpha)
        changed += winners[0.0] != winners[3.0]
    assert changed > 0 and checked > 0


@pytest.mark.parametrize("bridge, input_feed", [("attention", True), ("none", False), ("none", True)])
@torch.inference_mode()
def test_beam_one_equals_greedy_for_every_decoder(bridge, input_feed):
    from test_decoding import _batch, tiny_model
    for seed in range(4):
        model = tiny_model(bridge, input_feed, seed=seed, vocab=9, init=0.8)
        src, lengths, *_ = _batch(9, seed)
        dec = model.decoder_for("de")
        bridged = model.run_encoder(src, lengths, "en")
        state = dec.start_state(bridged.memory, bridged.memory_mask)
        for alpha in (0.0, 1.0):
            assert beam_search(dec, state, 12, beam_size=1, length_penalty=alpha) == greedy_search(dec, state, 12)


def test_beam_size_must_be_positive():
    dec, state = model_and_state(0)
    with pytest.raises(ValueError, match="beam_size must be at least 1"):
        beam_search(dec, state, 5, beam_size=0)


@torch.inference_mode()
def test_a_sentence_translates_the_same_whatever_its_batch():
    """Per-sentence output limits: a runaway output is cut at its own limit, not at the longest
    limit of its batch, so greedy and beam outputs of a sentence alone equal those in a batch."""
    dec, state = model_and_state(seed=3)
    with torch.no_grad():
        dec.generator.bias[EOS] -= 50.0  # never ends by itself: every output runs to its limit
    limits = [3, 9, 5, 1]
    greedy = greedy_search(dec, state, limits)
    assert [len(h) for h in greedy] == limits
    beams = beam_search(dec, state, limits, beam_size=3)
    assert [len(h) for h in beams] == limits
    for i in range(4):
        one = state.select(torch.tensor([i]))
        assert greedy_search(dec, one, limits[i]) == [greedy[i]]
        assert beam_search(dec, one, limits[i], beam_size=3) == [beams[i]]
    with pytest.raises(ValueError, match="one per sentence"):
        greedy_search(dec, state, [3, 4])


def test_beam_stop_top_ends_a_sentence_when_its_best_candidate_ends():
    """`stop="top"`: at step 2 the best candidate is [C] + </s>, so the sentence is done with that one
    hypothesis (OpenNMT-py's rule); `all` goes on to its second finished one, [A, B], which wins
    with length penalty 1."""
    dec = BigramDecoder(TABLE)
    top = beam_search_nbest(dec, bigram_state(), 10, beam_size=2, length_penalty=1.0, stop="top")[0]
    assert [h for _, h in top] == [[C]]
    assert beam_search(dec, bigram_state(), 10, beam_size=2, length_penalty=1.0, stop="all") == [[A, B]]
    with pytest.raises(ValueError, match="stop"):
        beam_search(dec, bigram_state(), 10, beam_size=2, stop="first")


@torch.inference_mode()
def test_the_first_beam_step_runs_once_per_sentence():
    """Every beam of a sentence starts from the same state: step 1 sees one row per sentence, later
    steps beam_size rows per live sentence."""
    dec, state = model_and_state(2)
    rows = []
    step = dec.step

    def counting(prev, st):
        rows.append(prev.size(0))
        return step(prev, st)
    dec.step = counting
    beam_search(dec, state, 6, beam_size=3)
    assert rows[0] == 4 and rows[1] == 12 and all(r % 3 == 0 for r in rows[1:])


class ForwardsStep:
    """A decoder wrapper as a new one is written: it forwards `start_state` and `step` and nothing else; the
    search selects, expands and reorders the state through the state itself."""

    def __init__(self, inner):
        self.inner = inner

    def start_state(self, memory, memory_mask, language=None):
        return self.inner.start_state(memory, memory_mask, language)

    def step(self, prev, state):
        return self.inner.step(prev, state)


DECODER_SETTINGS = {"lstm": {"hidden": 16, "layers": 2}, "lstm_feed": {"hidden": 16, "layers": 1, "input_feed": True},
                    "transformer": {"type": "transformer", "hidden": 16, "heads": 4, "layers": 2}}


@pytest.mark.parametrize("bridge", ["attention", "none"])
@pytest.mark.parametrize("kind", list(DECODER_SETTINGS))
@torch.inference_mode()
def test_a_decoder_wrapper_implements_only_step(kind, bridge):
    """Greedy and beam search through a wrapper that forwards `step` alone give the inner decoder's hypotheses
    and scores (sentences leaving the batch at their own limits: the state's `select`; beams: `expand_beams`
    and `reorder_beams`)."""
    torch.manual_seed(4)
    cfg = ModelConfig.model_validate({"embed_dim": 16, "encoder": {"hidden": 16, "layers": 1},
                                      "bridge": {"type": bridge, "heads": 3, "hidden": 8},
                                      "decoder": DECODER_SETTINGS[kind], "dropout": 0.0})
    model = TranslationNetwork(cfg, {"en": 15, "de": 15}, ["en"], ["de"]).eval()
    lengths = torch.tensor([6, 5, 3, 6, 2])
    src = torch.randint(4, 15, (5, 6), generator=torch.Generator().manual_seed(1))
    src[torch.arange(6)[None, :] >= lengths[:, None]] = 0
    bridged = model.run_encoder(src, lengths, "en")
    limits = [4, 11, 2, 7, 9]  # sentences leave the batch at different steps
    inner = model.decoder_for("de")
    results = []
    for decoder in (inner, ForwardsStep(inner)):
        state = decoder.start_state(bridged.memory, bridged.memory_mask, "de")
        results.append((greedy_search(decoder, state, limits), beam_search_nbest(decoder, state, limits, beam_size=3),
                        beam_search_nbest(decoder, state, limits, beam_size=3, stop="top")))
    assert results[0] == results[1]
    greedy, nbest, _ = results[0]
    assert len({len(h) for h in greedy}) > 2 and len({len(n[0][1]) for n in nbest}) > 2
