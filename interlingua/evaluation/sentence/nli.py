"""English NLI on frozen vectors: SICK-E (train/trial/test) and XNLI-en (k-fold on its dev set).

Pair features (default [u, v, |u-v|, u*v]) go to the same tuned logistic regression as the
classification tasks; the reports name the feature set.
"""
from __future__ import annotations

from collections.abc import Mapping

from interlingua.evaluation.sentence.classification import train_dev_test_accuracy
from interlingua.evaluation.sentence.crosslingual import pair_matrix, xnli_transfer
from interlingua.evaluation.sentence.protocol import CachedEmbedder
from interlingua.evaluation.sentence.tasks import Pairs


def sick_entailment(encoder: CachedEmbedder, splits: Mapping[str, Pairs], *, features: str = "full",
                    seed: int = 0) -> dict:
    """SICK-E accuracy (%): C chosen on the trial set, scored on the test set."""
    X = {s: pair_matrix(encoder, splits[s], "en", features) for s in ("train", "dev", "test")}
    res = train_dev_test_accuracy(X["train"], splits["train"].gold, X["dev"], splits["dev"].gold,
                                  X["test"], splits["test"].gold, seed=seed)
    res["features"] = features
    return res


def xnli_english(encoder: CachedEmbedder, pairs: Pairs, *, folds: int = 10, inner_folds: int = 5,
                 features: str = "full", seed: int = 0) -> dict:
    """XNLI-en accuracy (%) by k-fold over its dev set (the test set is held out)."""
    res = xnli_transfer(encoder, {"en": pairs}, train_sets=[["en"]], folds=folds, inner_folds=inner_folds,
                        features=features, seed=seed)
    return {"acc": res["matrix"]["en"]["en"], "n": res["n"], "folds": folds, "features": features,
            "protocol": f"{folds}-fold CV on XNLI dev-en, C by inner {inner_folds}-fold"}
