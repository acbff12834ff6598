"""XNLI transfer and SICK-E: language-agnostic label vectors transfer perfectly, random vectors stay at chance."""
from __future__ import annotations

import numpy as np
import pytest
from test_sentence_eval_fakes import LookupEmbedder, RandomEmbedder, need_data

from interlingua.evaluation.sentence.crosslingual import xnli_transfer
from interlingua.evaluation.sentence.nli import sick_entailment, xnli_english
from interlingua.evaluation.sentence.protocol import CachedEmbedder, EvaluationError
from interlingua.evaluation.sentence.tasks import NLI_LABELS, XNLI_LANGS, Pairs, load_sick, load_xnli


@pytest.fixture(scope="module")
def xnli():
    root = need_data("xnli").parent
    keep = np.sort(np.random.default_rng(0).choice(2490, 240, replace=False))
    data = {}
    for lang in XNLI_LANGS:
        p = load_xnli(root, lang)
        data[lang] = Pairs([p.a[i] for i in keep], [p.b[i] for i in keep], [p.gold[i] for i in keep])
    return data


def _label_vectors(data: dict[str, Pairs], languages) -> LookupEmbedder:
    """Premise -> e0; hypothesis -> a direction per label: the pair features reveal the label in any language."""
    table = {}
    for p in data.values():
        for a, b, label in zip(p.a, p.b, p.gold):
            table[a] = np.array([1.0, 0, 0, 0], np.float32)
            table[b] = np.eye(4, dtype=np.float32)[1 + NLI_LABELS.index(label)]
    return LookupEmbedder(table, languages)


def test_xnli_loader_is_parallel_and_balanced():
    root = need_data("xnli").parent
    en, de = load_xnli(root, "en"), load_xnli(root, "de")
    assert len(en) == len(de) == 2490 and en.gold == de.gold
    assert {c: en.gold.count(c) for c in NLI_LABELS} == {c: 830 for c in NLI_LABELS}


def test_language_agnostic_label_vectors_transfer_everywhere(xnli):
    enc = CachedEmbedder("oracle", _label_vectors(xnli, ["en", "de", "fr"]))
    res = xnli_transfer(enc, xnli, folds=3, inner_folds=2)
    assert res["missing_languages"] == ["es"]
    assert set(res["matrix"]) == {"en", "de", "fr", "en+de+fr"}
    assert all(acc > 97.0 for row in res["matrix"].values() for acc in row.values())


def test_random_vectors_stay_near_chance(xnli):
    res = xnli_transfer(CachedEmbedder("random", RandomEmbedder(dim=16)), xnli, train_sets=[["en"]],
                        folds=3, inner_folds=2)
    assert all(20.0 < acc < 47.0 for acc in res["matrix"]["en"].values())
    en = xnli_english(CachedEmbedder("random", RandomEmbedder(dim=16)), xnli["en"], folds=3, inner_folds=2)
    assert 20.0 < en["acc"] < 47.0


def test_non_parallel_sets_are_rejected(xnli):
    broken = {"en": xnli["en"], "de": Pairs(xnli["de"].a[:-1], xnli["de"].b[:-1], xnli["de"].gold[:-1])}
    with pytest.raises(EvaluationError, match="parallel"):
        xnli_transfer(CachedEmbedder("random", RandomEmbedder()), broken, folds=3)


def test_sick_entailment_oracle():
    root = need_data("senteval_downstream", "SICK").parent.parent
    sick = load_sick(root, "entailment")
    sick = {k: Pairs(v.a[:300], v.b[:300], v.gold[:300]) for k, v in sick.items()}
    assert set(sick["train"].gold) == {"entailment", "neutral", "contradiction"}
    # SICK sentences recur across pairs with different labels: give each pair's B its own key
    keyed = {k: Pairs(v.a, [f"{b} #{k}{i}" for i, b in enumerate(v.b)], v.gold) for k, v in sick.items()}
    res = sick_entailment(CachedEmbedder("oracle", _label_vectors(keyed, ["en"])), keyed)
    assert res["acc"] > 97.0 and res["features"] == "full"
