"""Teacher-forced decoding (training) and step-by-step decoding (search) are the same function.

Tiny random models, no training: the log-probabilities of a target sequence from one
teacher-forced pass equal those from feeding its tokens one at a time through
`Decoder.step`, with and without input feeding, with and without the bridge; and greedy
search, batched, follows the argmax path of step-by-step decoding of each sentence alone.
Also home of the tiny random checkpoints that other inference tests build on.
"""
from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from conftest import tiny_config

from interlingua.config import ModelConfig, parse_config
from interlingua.data.vocab import BOS, EOS, PAD, Vocab
from interlingua.model_files.checkpoint import build_payload, save_atomic
from interlingua.modules.model import TranslationNetwork
from interlingua.modules.search import beam_search_nbest, greedy_search

_WORDS = {
    "en": "a the dog cat man woman child runs sits eats red blue small big on in near park street ball".split(),
    "de": "ein der hund katze mann frau kind rennt sitzt isst rot blau klein groß auf in bei park straße ball".split(),
    "fr": ("un le chien chat homme femme enfant court assis mange rouge bleu petit grand sur dans près parc rue "
           "balle").split(),
}


def _sentences(lang: str, n: int = 300, seed: int = 0) -> list[str]:
    rng = random.Random(f"{lang}{seed}")
    return [" ".join(rng.choice(_WORDS[lang]) for _ in range(rng.randint(2, 12))) + " ." for _ in range(n)]


def random_checkpoint(path: Path, langs=("en", "de"), seed: int = 0, **model) -> Path:
    """A checkpoint of a randomly initialised model with real (tiny) vocabularies: every
    language has an encoder and a decoder; `model` overrides parts of the tiny model config."""
    cfg = tiny_config(path.parent / "corpus.yaml", path.parent,
                      directions={"mode": "explicit", "pairs": [[s, t] for s in langs for t in langs if s != t]},
                      model=model)
    cfg = parse_config(cfg)
    vocabs = {lang: Vocab.train(_sentences(lang), vocab_size=120, threads=1) for lang in langs}
    torch.manual_seed(seed)
    net = TranslationNetwork(cfg.model, {lang: len(v) for lang, v in vocabs.items()}, list(langs), list(langs))
    directions = [(s, t) for s in langs for t in langs if s != t]
    save_atomic(build_payload(cfg, net, vocabs, directions), path)
    return path


def tiny_model(bridge: str, input_feed: bool, seed: int = 0, vocab: int = 17,
               init: float | None = None) -> TranslationNetwork:
    torch.manual_seed(seed)
    cfg = ModelConfig.model_validate({"embed_dim": 12, "encoder": {"hidden": 16, "layers": 2},
                                      "bridge": {"type": bridge, "heads": 3, "hidden": 8},
                                      "decoder": {"hidden": 16, "layers": 2, "input_feed": input_feed}, "dropout": 0.3,
                                      "param_init": init})
    return TranslationNetwork(cfg, {"en": vocab, "de": vocab}, ["en"], ["de"]).eval()


SRC_LENGTHS = [7, 3, 5, 1]
TGT_LENGTHS = [6, 2, 9, 4]  # without the end-of-sentence token


def _batch(vocab: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    src = torch.zeros(len(SRC_LENGTHS), max(SRC_LENGTHS), dtype=torch.long)
    for i, n in enumerate(SRC_LENGTHS):
        src[i, :n] = torch.randint(4, vocab, (n,), generator=g)
    tgt = [torch.randint(4, vocab, (n,), generator=g).tolist() for n in TGT_LENGTHS]
    width = max(TGT_LENGTHS) + 1
    tgt_in = torch.full((len(tgt), width), PAD)
    tgt_out = torch.full((len(tgt), width), PAD)
    for i, seq in enumerate(tgt):
        tgt_in[i, :len(seq) + 1] = torch.tensor([BOS] + seq)
        tgt_out[i, :len(seq) + 1] = torch.tensor(seq + [EOS])
    return src, torch.tensor(SRC_LENGTHS), tgt, tgt_in, tgt_out


def _stepwise_logprobs(model: TranslationNetwork, src: torch.Tensor, length: int, tokens: list[int]) -> torch.Tensor:
    """One sentence alone (no padding anywhere): log p of each next token, BOS fed first."""
    dec = model.decoder_for("de")
    bridged = model.run_encoder(src[None, :length], torch.tensor([length]), "en")
    state = dec.start_state(bridged.memory, bridged.memory_mask)
    prev, rows = torch.tensor([BOS]), []
    for tok in tokens:
        logp, state = dec.step(prev, state)
        rows.append(logp[0])
        prev = torch.tensor([tok])
    return torch.stack(rows)


CASES = [("attention", False), ("attention", True), ("none", False), ("none", True)]


@pytest.mark.parametrize("bridge, input_feed", CASES)
@torch.inference_mode()
def test_teacher_forcing_equals_step_by_step(bridge, input_feed):
    model = tiny_model(bridge, input_feed)
    assert model.has_bridge == (bridge == "attention") and model.decoder_for("de").input_feed == input_feed
    src, lengths, tgt, tgt_in, tgt_out = _batch(17)
    dec = model.decoder_for("de")
    bridged = model.run_encoder(src, lengths, "en")
    att, _ = dec(tgt_in, dec.start_state(bridged.memory, bridged.memory_mask))
    forced = torch.log_softmax(dec.generator(att).float(), dim=-1)       # (batch, T, V), padded batch
    total = 0.0
    for i, seq in enumerate(tgt):
        stepped = _stepwise_logprobs(model, src[i], int(lengths[i]), seq + [EOS])
        assert torch.allclose(forced[i, :len(seq) + 1], stepped, atol=1e-5), (bridge, input_feed, i)
        total -= float(stepped.gather(1, torch.tensor(seq + [EOS])[:, None]).sum())
    # the training loss sums the same log-probabilities of the gold tokens
    loss = model.loss(src, lengths, tgt_in, tgt_out, "en", "de")
    assert loss.n_tokens == sum(TGT_LENGTHS) + len(TGT_LENGTHS)
    assert loss.nll_sum == pytest.approx(total, rel=1e-5)


def _argmax_path(model: TranslationNetwork, src: torch.Tensor, length: int, max_len: int) -> list[int]:
    dec = model.decoder_for("de")
    bridged = model.run_encoder(src[None, :length], torch.tensor([length]), "en")
    state = dec.start_state(bridged.memory, bridged.memory_mask)
    prev, out = torch.tensor([BOS]), []
    for _ in range(max_len):
        logp, state = dec.step(prev, state)
        tok = int(logp[0].argmax())
        if tok == EOS:
            break
        out.append(tok)
        prev = torch.tensor([tok])
    return out


@pytest.mark.parametrize("bridge, input_feed", CASES)
@torch.inference_mode()
def test_batched_greedy_search_follows_the_argmax_path_of_each_sentence(bridge, input_feed):
    mixed = 0
    for seed in range(10):
        # large uniform weights on a small vocabulary: outputs depend on the source, and some
        # sentences of a batch stop before others, so the batch shrinks mid-search
        model = tiny_model(bridge, input_feed, seed=seed, vocab=9, init=0.8)
        src, lengths, *_ = _batch(9, seed)
        dec = model.decoder_for("de")
        bridged = model.run_encoder(src, lengths, "en")
        batched = greedy_search(dec, dec.start_state(bridged.memory, bridged.memory_mask), 12)
        alone = [_argmax_path(model, src[i], int(lengths[i]), 12) for i in range(len(SRC_LENGTHS))]
        assert batched == alone, (bridge, input_feed, seed)
        mixed += len({len(h) for h in batched}) > 1
    assert mixed >= 2  # batches whose sentences finished at different steps


@pytest.mark.parametrize("bridge, input_feed", CASES)
@torch.inference_mode()
def test_beam_search_keeps_each_sentences_memory_once_and_finds_what_it_finds_alone(bridge, input_feed):
    """The LSTM decoder's hypotheses attend together over their sentence's one memory (as the Transformer's do):
    expanding to beams copies no memory, and batched beam search gives each sentence what it gives alone."""
    model = tiny_model(bridge, input_feed, seed=4, vocab=9, init=0.8)
    src, lengths, *_ = _batch(9, 4)
    dec = model.decoder_for("de")
    bridged = model.run_encoder(src, lengths, "en")
    state = dec.start_state(bridged.memory, bridged.memory_mask)
    beams = state.expand_beams(torch.arange(len(SRC_LENGTHS)).repeat_interleave(3))
    assert beams.batch_size == 3 * len(SRC_LENGTHS) and beams.memory is state.memory and beams.keys is state.keys
    with pytest.raises(ValueError, match="as many rows a sentence"):
        state.join(beams)  # rows before beams and rows with them do not join: their sentences could not be told
    batched = beam_search_nbest(dec, state, 12, beam_size=3)
    for i in range(len(SRC_LENGTHS)):
        alone = beam_search_nbest(dec, state.select(torch.tensor([i])), 12, beam_size=3)[0]
        assert [h for _, h in alone] == [h for _, h in batched[i]]
        assert [s for s, _ in alone] == pytest.approx([s for s, _ in batched[i]], abs=1e-5)
