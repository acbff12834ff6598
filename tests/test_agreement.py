"""`train.agreement`: the loss between a sentence's and its translation's representation.

The loss functions on hand-made vectors, the term inside `model(batch)` (which encoders it reaches,
copy directions, a batch of one, every kind), and a tiny end-to-end run on a synthetic task where
agreement must raise translation retrieval over the same run without it. Resume and two gloo
processes with agreement on are tested in test_resume.py and test_distributed.py.
"""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from conftest import tiny_config, write_multiway_corpus

from interlingua.config import AgreementConfig, ModelConfig, parse_config
from interlingua.data.batching import make_batch
from interlingua.errors import ConfigError
from interlingua.modules.agreement import agreement_losses
from interlingua.modules.model import TranslationNetwork

VOCAB = 60


def _vectors(n: int = 6, d: int = 16, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("loss", ["cosine", "mse"])
def test_zero_for_identical_and_positive_otherwise(loss):
    x = _vectors()
    assert torch.allclose(agreement_losses(x, x.clone(), loss), torch.zeros(len(x)), atol=1e-6)
    assert (agreement_losses(x, _vectors(seed=1), loss) > 1e-3).all()
    heads = _vectors(12).reshape(6, 2, 16)
    assert torch.allclose(agreement_losses(heads, heads.clone(), loss), torch.zeros(6), atol=1e-6)


def test_contrastive_prefers_the_translation_to_the_other_sentences():
    x = _vectors(8)
    matched = agreement_losses(x, x.clone(), "contrastive", temperature=0.1)
    shuffled = agreement_losses(x, x[torch.roll(torch.arange(8), 1)], "contrastive", temperature=0.1)
    assert (matched < shuffled).all()
    # orthogonal sentences, identical translations: nothing left to learn at a low temperature
    eye = torch.eye(8)
    assert agreement_losses(eye, eye.clone(), "contrastive", temperature=0.01).max() < 1e-6


def test_contrastive_with_a_batch_of_one_is_zero_and_finite():
    x = _vectors(1)
    loss = agreement_losses(x, _vectors(1, seed=3), "contrastive")
    assert loss.shape == (1,) and torch.isfinite(loss).all() and float(loss) == pytest.approx(0.0, abs=1e-6)


def _model(**model) -> TranslationNetwork:
    cfg = ModelConfig.model_validate({"embed_dim": 16, "encoder": {"hidden": 16, "layers": 1},
                                      "bridge": {"heads": 3, "hidden": 8}, "decoder": {"hidden": 16, "layers": 1},
                                      "dropout": 0.0, **model})
    torch.manual_seed(0)
    return TranslationNetwork(cfg, {"en": VOCAB, "de": VOCAB}, ["de", "en"], ["de", "en"])


def _batch(src_lang: str = "en", tgt_lang: str = "de", n: int = 5, prefix: int | None = None):
    rng = np.random.default_rng(0)
    src = [rng.integers(4, VOCAB, size=rng.integers(2, 7)) for _ in range(n)]
    tgt = [rng.integers(4, VOCAB, size=rng.integers(2, 7)) for _ in range(n)]
    return make_batch(src, tgt, src_lang, tgt_lang, src_prefix=prefix, reverse_prefix=prefix)


def _encoder_grads(model: TranslationNetwork, lang: str) -> float:
    return sum(float(p.grad.abs().sum()) for p in model.encoders[lang].parameters() if p.grad is not None)


@pytest.mark.parametrize("loss", ["contrastive", "cosine", "mse"])
def test_gradients_reach_both_encoders_or_only_the_source_one_under_stop_gradient(loss):
    model = _model()
    model(_batch(), agreement=AgreementConfig(weight=1.0, loss=loss)).loss.backward()
    assert _encoder_grads(model, "en") > 0 and _encoder_grads(model, "de") > 0
    model.zero_grad(set_to_none=True)
    model(_batch(), agreement=AgreementConfig(weight=1.0, loss=loss, detach_target=True)).loss.backward()
    assert _encoder_grads(model, "en") > 0 and _encoder_grads(model, "de") == 0
    model.zero_grad(set_to_none=True)
    model(_batch()).loss.backward()  # without agreement, en->de never runs the de encoder
    assert _encoder_grads(model, "de") == 0


def test_copy_directions_are_skipped_and_the_term_is_reported():
    model = _model()
    on = AgreementConfig(weight=2.0)
    copy = model(_batch("en", "en"), agreement=on)
    assert copy.agreement_sentences == 0 and copy.agreement == 0.0
    plain = model(_batch("en", "en"))
    assert torch.equal(copy.loss, plain.loss)
    cross = model(_batch(), agreement=on)
    without = model(_batch())
    assert cross.agreement_sentences == 5 and cross.agreement > 0
    n_tokens = cross.n_tokens
    assert float((cross.loss - without.loss).detach()) == pytest.approx(2.0 * cross.agreement / n_tokens, rel=1e-5)


def test_a_share_of_the_batch_is_compared_and_counted_for_all_of_it():
    """`sentences`: the first n of the batch's sentences only (the others' targets not encoded), their
    sum scaled by batch / n; as many or more than the batch: all of them, as without the option."""
    model = _model()
    without = model(_batch())
    part = model(_batch(), agreement=AgreementConfig(weight=2.0, sentences=2))
    assert part.agreement_sentences == 2 and part.agreement > 0
    assert float((part.loss - without.loss).detach()) == pytest.approx(
        2.0 * 5 / 2 * part.agreement / part.n_tokens, rel=1e-5)
    whole = model(_batch(), agreement=AgreementConfig(weight=2.0))
    assert torch.equal(model(_batch(), agreement=AgreementConfig(weight=2.0, sentences=5)).loss, whole.loss)


@pytest.mark.parametrize("model_cfg, agreement", [
    ({}, {"pooling": "heads"}),
    ({"bridge": {"type": "ntdv", "heads": 2, "hidden": 8}}, {}),
    ({"bridge": {"type": "ntdv", "heads": 2, "hidden": 8}}, {"pooling": "heads"}),
    ({"bridge": {"type": "none"}, "encoder": {"type": "transformer", "layers": 2, "heads": 2},
      "decoder": {"type": "transformer", "layers": 1, "heads": 2}}, {}),
    ({"bridge": {"type": "none"}, "encoder": {"type": "transformer", "layers": 2, "heads": 2, "residual_drop_layer": 1},
      "decoder": {"type": "transformer", "layers": 1, "heads": 2}}, {"layer": 1}),
    ({}, {"layer": 0}),
])
def test_every_kind_and_pooling_trains_with_agreement(model_cfg, agreement):
    model = _model(**model_cfg)
    agree = AgreementConfig(weight=1.0, **agreement)
    model.check_agreement(agree, [("en", "de")])
    out = model(_batch(), agreement=agree)
    out.loss.backward()
    assert out.agreement > 0 and _encoder_grads(model, "de") > 0


def test_a_shared_model_with_source_tags_leaves_the_tag_out_of_the_pooled_states():
    model = _model(shared=True, bridge={"type": "none"})
    tag = VOCAB - 1
    agree = AgreementConfig(weight=1.0, loss="cosine")
    same = make_batch([np.array([5, 6, 7])], [np.array([5, 6, 7])], "en", "de", src_prefix=tag, reverse_prefix=tag)
    model.eval()
    assert model(same, agreement=agree).agreement == pytest.approx(0.0, abs=1e-6)


def test_settings_that_cannot_work_are_refused_before_training():
    model = _model(bridge={"type": "none"})
    with pytest.raises(ConfigError, match="pooling: heads needs a bridge"):
        model.check_agreement(AgreementConfig(weight=1.0, pooling="heads"), [("en", "de")])
    with pytest.raises(ConfigError, match="layer 5 is beyond"):
        model.check_agreement(AgreementConfig(weight=1.0, layer=5), [("en", "de")])
    bilingual = TranslationNetwork(model.cfg, {"en": VOCAB, "de": VOCAB}, ["en"], ["de"])
    with pytest.raises(ConfigError, match="target languages have none.*de"):
        bilingual.check_agreement(AgreementConfig(weight=1.0), [("en", "de")])
    bilingual.check_agreement(AgreementConfig(weight=0.0), [("en", "de")])  # off: nothing to check


# -- a synthetic task: two "languages" that say the same thing with different words --------------
def _synthetic_corpus(root, n_train: int = 600, n_test: int = 100):
    rng = random.Random(0)
    words = [f"w{i}" for i in range(40)]
    other = {w: f"z{int(w[1:]) * 7 % 40}q" for w in words}

    def lines(n):
        en = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 7))) for _ in range(n)]
        return en, [" ".join(other[w] for w in reversed(s.split())) for s in en]
    train_en, train_de = lines(n_train)
    test_en, test_de = lines(n_test)
    return write_multiway_corpus(root, "synthetic", {"train": {"en": train_en, "de": train_de},
                                                      "val": {"en": test_en, "de": test_de}})


def test_agreement_raises_retrieval_on_a_synthetic_task(tmp_path):
    from interlingua.evaluation.sentence.retrieval import retrieval_accuracy
    from interlingua.inference.api import load
    from interlingua.training.trainer import train
    corpus = _synthetic_corpus(tmp_path)
    retrieval = {}
    for name, weight in (("without", 0.0), ("with", 5.0)):
        cfg = parse_config(tiny_config(
            corpus, tmp_path / name,
            preprocess={"vocab_size": 120, "max_train_sentences": 600, "max_valid_sentences": 20},
            directions={"mode": "explicit", "pairs": [["en", "de"], ["de", "en"]]},
            model={"embed_dim": 32, "encoder": {"hidden": 32, "layers": 1}, "bridge": {"heads": 4, "hidden": 16},
                   "decoder": {"hidden": 32, "layers": 1}},
            train={"max_steps": 120, "valid_every": 120, "batch_size": 32, "lr": 0.01, "precision": "fp32",
                   "agreement": {"weight": weight, "loss": "contrastive", "temperature": 0.1}}))
        result = train(cfg)
        model = load(result.last_checkpoint, device="cpu")
        en = (tmp_path / "val.en").read_text().splitlines()
        de = (tmp_path / "val.de").read_text().splitlines()
        retrieval[name] = retrieval_accuracy(model.encode(en, "en"), model.encode(de, "de"))
    assert retrieval["with"] > retrieval["without"] + 20, retrieval
    assert retrieval["with"] > 80, retrieval


def test_contrastive_with_both_languages_as_negatives_penalises_a_language_offset():
    """With the other translations as the only negatives, moving every sentence of one language by the
    same vector changes little; with the own language's sentences as negatives too, an offset that
    brings a language's sentences together costs."""
    x = _vectors(8, seed=5)
    offset = torch.full((16,), 3.0)
    src, tgt = x + offset, x + 0.3 * _vectors(8, seed=6) - offset
    plain = agreement_losses(src, tgt, "contrastive", 0.1)
    both = agreement_losses(src, tgt, "contrastive", 0.1, negatives="both")
    centred = agreement_losses(src - offset, tgt + offset, "contrastive", 0.1, negatives="both")
    assert both.mean() > plain.mean() and both.mean() > centred.mean()
    one = agreement_losses(x[:1], x[:1].clone(), "contrastive", negatives="both")
    assert torch.isfinite(one).all() and float(one) == pytest.approx(0.0, abs=1e-6)


def test_agreement_with_a_frozen_translation_model_sampled_softmax_and_bf16():
    """NTDV's `trainable: bridge`: only the bridge learns from it; with the sampled softmax and under
    bf16 autocast the term is still computed (in fp32) and finite."""
    model = _model(bridge={"type": "ntdv", "heads": 2, "hidden": 8})
    model.freeze_translation()
    model.train()
    agree = AgreementConfig(weight=1.0, negatives="both")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(_batch(), softmax_sample=10, agreement=agree)
    out.loss.backward()
    assert torch.isfinite(out.loss) and out.agreement > 0
    assert all(p.grad is None for p in model.encoders.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.bridge.parameters())


def test_the_term_starts_at_its_step_and_its_weight_ramps(tmp_path):
    """`start_step`: no agreement loss (and no target encoding) before it; `ramp_steps`: the weight rises
    linearly from there to `weight`; `every`: only every so many steps from `start_step` on."""
    import json

    from interlingua.training.trainer import train
    ramp = AgreementConfig(weight=4.0, start_step=3, ramp_steps=4)
    assert [ramp.weight_at(step) for step in range(8)] == [0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 4.0]
    assert AgreementConfig(weight=4.0, start_step=2).weight_at(2) == 4.0
    assert AgreementConfig(weight=0.0, start_step=0).weight_at(5) == 0.0
    assert [AgreementConfig(weight=4.0, start_step=1, every=3).weight_at(s) for s in range(8)] == [
        0.0, 4.0, 0.0, 0.0, 4.0, 0.0, 0.0, 4.0]
    corpus = _synthetic_corpus(tmp_path)
    cfg = parse_config(tiny_config(
        corpus, tmp_path / "run", preprocess={"vocab_size": 120, "max_train_sentences": 200, "max_valid_sentences": 10},
        directions={"mode": "explicit", "pairs": [["en", "de"], ["de", "en"]]},
        train={"max_steps": 6, "valid_every": 6, "log_every": 1, "batch_size": 8, "precision": "fp32",
               "agreement": {"weight": 2.0, "start_step": 3, "ramp_steps": 2, "every": 2}}))
    result = train(cfg)
    lines = [json.loads(x) for x in (result.work_dir / "metrics.jsonl").read_text().splitlines()]
    agreement = {x["step"]: x.get("agreement") for x in lines if x.get("kind", "train") == "train" and "loss" in x}
    assert [agreement[s] is None for s in range(1, 7)] == [True, True, True, False, True, False], agreement
