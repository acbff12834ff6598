"""A tiny model trained for seconds on real Multi30k lines must have learned something."""
import torch
from sacrebleu.metrics import BLEU

from interlingua.inference.embedder import Embedder
from interlingua.inference.translator import Translator
from interlingua.training.checkpoint import load_model
from interlingua.data.corpus import load_corpus, read_group


def training_lines(corpus_yaml, n=200):
    g = read_group(load_corpus(corpus_yaml).groups("train")[0], limit=n)
    return g["en"], g["de"]


def test_trained_model_beats_untrained_on_its_training_lines(trained_model, multi30k_corpus):
    en, de = training_lines(multi30k_corpus)
    loaded = load_model(trained_model)
    hyps = Translator(loaded).translate(en[:100], "en", "de", beam_size=3)
    trained_bleu = BLEU(lowercase=True).corpus_score(hyps, [de[:100]]).score
    untrained = load_model(trained_model)
    torch.manual_seed(0)
    for p in untrained.model.parameters():
        torch.nn.init.uniform_(p, -0.1, 0.1)
    base_hyps = Translator(untrained).translate(en[:100], "en", "de", beam_size=3)
    untrained_bleu = BLEU(lowercase=True).corpus_score(base_hyps, [de[:100]]).score
    assert trained_bleu > 10 and trained_bleu > 5 * max(untrained_bleu, 0.5), (trained_bleu, untrained_bleu)


def test_translations_of_a_multilingual_model_and_vectors(trained_model, multi30k_corpus):
    tr = Translator(trained_model)
    en, de = training_lines(multi30k_corpus, 20)
    assert all(tr.translate(de[:5], "de", "en", beam_size=2))
    copies = tr.translate(de[:20], "de", "de")  # monolingual copy direction
    assert sum(c == d.lower() for c, d in zip(copies, de)) >= 5
    emb = Embedder(trained_model)
    v = emb.encode(de[:20], "de")
    assert v.shape == (20, 64) and v.dtype.name == "float32"
