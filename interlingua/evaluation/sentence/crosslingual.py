"""XNLI-style transfer: a classifier trained on one language's sentence-pair vectors, tested on others.

Only XNLI's dev sets are available (2,490 parallel examples per language; test is held
out), so the protocol is k-fold over example indices: each fold trains on the training
indices of the training language(s) and tests every language on the held-out indices, so
no example is seen in any language at both training and test time. C is tuned by inner
k-fold on the training part only (a several-language training set takes the median of the
C values its languages chose alone on that fold). Accuracies are percentages; chance is 33.3.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from sklearn.model_selection import StratifiedKFold
from tqdm import tqdm

from interlingua.evaluation.sentence.classification import fixed_logreg, tuned_logreg
from interlingua.evaluation.sentence.features import pair_features
from interlingua.evaluation.sentence.protocol import CachedEmbedder, EvaluationError
from interlingua.evaluation.sentence.tasks import Pairs


def pair_matrix(encoder: CachedEmbedder, pairs: Pairs, lang: str, features: str = "full") -> np.ndarray:
    """Pair features of premise/hypothesis vectors in `lang`."""
    return pair_features(encoder.mean(pairs.a, lang), encoder.mean(pairs.b, lang), features)


def xnli_transfer(encoder: CachedEmbedder, data: Mapping[str, Pairs], *,
                  train_sets: Sequence[Sequence[str]] | None = None, folds: int = 10, inner_folds: int = 5,
                  features: str = "full", seed: int = 0) -> dict:
    """Accuracy matrix {train languages joined by '+': {test language: acc}} over k folds.

    `data` holds parallel XNLI sets per language; languages the embedder lacks are listed in
    'missing_languages' and left out. `train_sets` defaults to each language alone plus all
    available languages together (the papers' EN+DE+FR+ES row)."""
    langs = [lang for lang in data if encoder.has(lang)]
    missing = [lang for lang in data if not encoder.has(lang)]
    if not langs:
        return {"matrix": {}, "languages": [], "missing_languages": missing, "folds": 0}
    n = {len(p) for p in data.values()}
    if len(n) != 1:
        raise EvaluationError(f"XNLI sets must be parallel (same length in every language), got lengths {sorted(n)}")
    y = np.asarray(data[langs[0]].gold)
    for lang in langs[1:]:
        if list(data[lang].gold) != list(y):
            raise EvaluationError(f"XNLI labels of '{lang}' differ from those of '{langs[0]}': "
                                  "the sets are not parallel")
    if train_sets is None:
        train_sets = [[lang] for lang in langs] + ([langs] if len(langs) > 1 else [])
    train_sets = [list(ts) for ts in train_sets if all(lang in langs for lang in ts)]
    X = {lang: pair_matrix(encoder, data[lang], lang, features) for lang in langs}
    scores: dict[str, dict[str, list[float]]] = {"+".join(ts): {lang: [] for lang in langs} for ts in train_sets}
    chosen_C: dict[str, list[float]] = {"+".join(ts): [] for ts in train_sets}
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    for tr, te in tqdm(list(splitter.split(y, y)), desc=f"XNLI folds ({encoder.name})", leave=False):
        singles = [ts for ts in train_sets if len(ts) == 1]
        for ts in singles + [ts for ts in train_sets if len(ts) > 1]:
            X_tr, y_tr = np.vstack([X[lang][tr] for lang in ts]), np.concatenate([y[tr]] * len(ts))
            single_cs = [chosen_C[s[0]][-1] for s in singles if chosen_C[s[0]] and s[0] in ts]
            if len(ts) > 1 and single_cs:
                # several languages at once: the C its languages chose alone on this fold (median), no
                # second search on a k-times larger set
                C = float(np.median(single_cs))
                model = fixed_logreg(X_tr, y_tr, C=C, seed=seed)
            else:
                tuned = tuned_logreg(X_tr, y_tr, folds=inner_folds, seed=seed)
                model, C = tuned.model, tuned.C
            chosen_C["+".join(ts)].append(C)
            for lang in langs:
                scores["+".join(ts)][lang].append(100.0 * model.score(X[lang][te], y[te]))
    matrix = {name: {lang: float(np.mean(v)) for lang, v in row.items()} for name, row in scores.items()}
    return {"matrix": matrix, "languages": langs, "missing_languages": missing, "folds": folds,
            "n": int(len(y)), "features": features, "C": chosen_C}
