"""A tiny model trained for seconds on real Multi30k lines must have learned something."""
import numpy as np
import torch
from sacrebleu.metrics import BLEU

from interlingua.data.corpus import load_corpus, read_group
from interlingua.evaluation.sentence.retrieval import cosine_matrix
from interlingua.inference.api import Model, load
from interlingua.model_files.checkpoint import load_checkpoint


def training_lines(corpus_yaml, n=200):
    g = read_group(load_corpus(corpus_yaml).groups("train")[0], limit=n)
    return g["en"], g["de"]


def test_trained_model_beats_untrained_on_its_training_lines(trained_model, multi30k_corpus):
    en, de = training_lines(multi30k_corpus)
    loaded = load_checkpoint(trained_model)
    hyps = Model(loaded).translate(en[:100], "en", "de", beam=3)
    trained_bleu = BLEU(lowercase=True).corpus_score(hyps, [de[:100]]).score
    untrained = load_checkpoint(trained_model)
    torch.manual_seed(0)
    for p in untrained.network.parameters():
        torch.nn.init.uniform_(p, -0.1, 0.1)
    base_hyps = Model(untrained).translate(en[:100], "en", "de", beam=3)
    untrained_bleu = BLEU(lowercase=True).corpus_score(base_hyps, [de[:100]]).score
    assert trained_bleu > 10 and trained_bleu > 5 * max(untrained_bleu, 0.5), (trained_bleu, untrained_bleu)


def test_translations_of_a_multilingual_model_and_vectors(trained_model, multi30k_corpus):
    tr = load(trained_model)
    en, de = training_lines(multi30k_corpus, 20)
    hyps = tr.translate(de, "de", "en", beam=2)
    bleu = BLEU(lowercase=True).corpus_score(hyps, [en]).score
    assert bleu > 50, (bleu, hyps[:3])  # about 90 on these lines the model was overfitted on
    copies = tr.translate(de[:20], "de", "de")  # monolingual copy direction
    assert sum(c == d.lower() for c, d in zip(copies, de)) >= 15  # 19 of 20 when measured
    emb = load(trained_model)
    v = emb.encode(de[:20], "de")
    assert v.shape == (20, 64) and v.dtype.name == "float32"
    np.testing.assert_array_equal(v, emb.encode(de[:20], "de"))  # deterministic
    np.testing.assert_allclose(emb.encode([de[7]], "de")[0], v[7], atol=1e-5)  # the batch does not change a vector
    # the bridge maps a sentence and its translation close together: much closer than unrelated lines
    sim = cosine_matrix(emb.encode(en[:20], "en"), v)
    matched, unrelated = np.diag(sim).mean(), sim[~np.eye(20, dtype=bool)].mean()
    assert matched > unrelated + 0.2, (matched, unrelated)  # about 0.51 vs 0.12 when measured
    assert np.mean(sim.argmax(1) == np.arange(20)) >= 0.5  # the translation is the nearest de line (85% measured)
