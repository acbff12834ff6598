"""`interlingua analyze encoder`: what each encoder layer keeps of token, position and language
(paper 004's analyses, for every encoder kind).

- Token-identity and position probes per layer (Figure 3, Table 8): the model is frozen, one
  linear layer + softmax is trained on the token states of a training split and scored on the test
  split. Classes are the token ids / positions seen in training; a test token whose id or position
  never occurred in training counts as wrong.
- Similarity between languages per layer (`representation_similarity.py`): mean-pooled states of
  the multi-way test sentences, for every language pair: SVCCA at a fixed number of directions k
  (`--svcca-k`) and linear CKA, each beside two references, independent Gaussian data of the same
  shapes and the same states with the translation pairing broken (rows permuted). The paper's
  99%-variance SVCCA (Figure 5, Table 9) is still reported, as `svcca_99` with the number of
  directions it kept per language, but not to be compared across layers: its score moves with
  that number alone.
- Token-level language identification from the encoder output (Table 9, Figure 4): accuracy and
  confusion matrix; the more alike the languages' states, the lower.
- Cross-lingual retrieval per layer: the cosine nearest neighbour of each mean-pooled sentence among
  the other language's test sentences, both ways for every pair.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from itertools import combinations
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from interlingua.atomic_files import write_text_atomic
from interlingua.errors import DataError, InterlinguaError, LanguageError
from interlingua.evaluation.cosine import cosine_matrix
from interlingua.evaluation.encoder_record import EncoderAnalysis
from interlingua.evaluation.encoder_report import markdown, plot_confusion, plot_layers
from interlingua.evaluation.registry import Report, named_checkpoints
from interlingua.evaluation.representation_similarity import DRAWS, LayerSimilarity, layer_similarity
from interlingua.evaluation.svcca import SVCCA_K
from interlingua.inference.api import Model, load


@dataclass(frozen=True)
class ProbeSettings:
    """A linear probe's training (paper 004: 5 epochs of a linear layer + softmax on the frozen model).
    The rate is high for Adam because a few thousand tokens give few steps in 5 epochs, and a
    zero-initialised linear softmax on standardised features is a convex problem that tolerates it."""

    epochs: int = 5
    lr: float = 1e-2
    batch_size: int = 32
    seed: int = 0


# --- probes ------------------------------------------------------------------------------------


def linear_probe_accuracy(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray,
                          n_classes: int, settings: ProbeSettings = ProbeSettings(),
                          device: str | torch.device = "cpu") -> tuple[float, np.ndarray]:
    """Train linear + softmax (Adam, seeded shuffles, zero-initialised so runs repeat exactly) on
    standardised features; return the test accuracy and predictions. Labels < 0 are never right."""
    mean, std = train_x.mean(0), train_x.std(0) + 1e-6
    xs = torch.from_numpy(((train_x - mean) / std).astype(np.float32)).to(device)
    ys = torch.from_numpy(train_y.astype(np.int64)).to(device)
    linear = torch.nn.Linear(xs.size(1), n_classes).to(device)
    torch.nn.init.zeros_(linear.weight)
    torch.nn.init.zeros_(linear.bias)
    opt = torch.optim.Adam(linear.parameters(), lr=settings.lr)
    gen = torch.Generator().manual_seed(settings.seed)
    with torch.enable_grad():
        for _ in range(settings.epochs):
            order = torch.randperm(len(xs), generator=gen).to(device)
            for start in range(0, len(xs), settings.batch_size):
                idx = order[start:start + settings.batch_size]
                loss = F.cross_entropy(linear(xs[idx]), ys[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
    with torch.no_grad():
        xt = torch.from_numpy(((test_x - mean) / std).astype(np.float32)).to(device)
        pred = torch.cat([linear(xt[i:i + 4096]).argmax(-1) for i in range(0, len(xt), 4096)]).cpu().numpy()
    return float((pred == test_y).mean()) if len(test_y) else 0.0, pred


def _labels(values: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Index of each value in the sorted `classes`, -1 where it is not one of them."""
    idx = np.clip(np.searchsorted(classes, values), 0, max(len(classes) - 1, 0))
    return np.where(classes[idx] == values, idx, -1) if len(classes) else np.full(len(values), -1)


def _tokens(states: Sequence[np.ndarray], ids: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-sentence (layers, n_i, d) states -> all tokens (layers, N, d), their ids (N,), positions (N,)."""
    x = np.concatenate(list(states), axis=1)
    return x, np.concatenate([np.asarray(i) for i in ids]), np.concatenate([np.arange(s.shape[1]) for s in states])


def seen_share(train: Sequence[np.ndarray], test: Sequence[np.ndarray]) -> float:
    """Share of the test values (token ids) that occur in training: the token probe's ceiling."""
    values = np.concatenate([np.asarray(t) for t in test]) if test else np.zeros(0)
    return float(np.isin(values, np.concatenate([np.asarray(t) for t in train])).mean()) if len(values) else 0.0


def layer_probes(train_states: Sequence[np.ndarray], train_ids: Sequence[np.ndarray], test_states: Sequence[np.ndarray],
                 test_ids: Sequence[np.ndarray], settings: ProbeSettings = ProbeSettings(),
                 device: str | torch.device = "cpu") -> tuple[list[float], list[float]]:
    """Token-identity and position accuracy per layer, from per-sentence (layers, n_i, d) states and ids."""
    xtr, idtr, postr = _tokens(train_states, train_ids)
    xte, idte, poste = _tokens(test_states, test_ids)
    token_classes = np.unique(idtr)
    positions = np.arange(postr.max() + 1)           # 0 .. the longest training sentence
    tok_tr, tok_te = _labels(idtr, token_classes), _labels(idte, token_classes)
    pos_te = _labels(poste, positions)
    token_acc, position_acc = [], []
    for layer in range(xtr.shape[0]):
        token_acc.append(linear_probe_accuracy(xtr[layer], tok_tr, xte[layer], tok_te, len(token_classes),
                                               settings, device)[0])
        position_acc.append(linear_probe_accuracy(xtr[layer], postr, xte[layer], pos_te, len(positions), settings,
                                                  device)[0])
    return token_acc, position_acc


def language_id(train: dict[str, np.ndarray], test: dict[str, np.ndarray], settings: ProbeSettings = ProbeSettings(),
                device: str | torch.device = "cpu") -> tuple[float, np.ndarray]:
    """Token-level language classifier: states (N_lang, d) per language -> test accuracy and the
    confusion matrix (true language x predicted language, token counts), languages in `train`'s order."""
    langs = list(train)
    ytr = np.concatenate([np.full(len(train[lang]), i) for i, lang in enumerate(langs)])
    yte = np.concatenate([np.full(len(test[lang]), i) for i, lang in enumerate(langs)])
    acc, pred = linear_probe_accuracy(np.concatenate([train[lang] for lang in langs]), ytr,
                                      np.concatenate([test[lang] for lang in langs]), yte, len(langs), settings, device)
    confusion = np.zeros((len(langs), len(langs)), dtype=np.int64)
    np.add.at(confusion, (yte, pred), 1)
    return acc, confusion


# --- sentence-level comparisons ----------------------------------------------------------------


def keyed_retrieval_share(queries: np.ndarray, candidates: np.ndarray, query_keys: Sequence[str],
                          candidate_keys: Sequence[str]) -> float:
    """Share of queries whose cosine nearest candidate has the query's key (its translation's text,
    so that a repeated sentence counts whichever copy is found)."""
    best = cosine_matrix(queries, candidates).argmax(1)
    return float(np.mean([candidate_keys[j] == key for j, key in zip(best, query_keys)]))


def pair_scores(a: np.ndarray, b: np.ndarray, a_keys: Sequence[str], b_keys: Sequence[str], svcca_k: int = SVCCA_K,
                draws: int = DRAWS) -> tuple[list[LayerSimilarity], list[float]]:
    """Per layer, for aligned pooled vectors a, b (n, layers, d): every similarity measure with its
    references, and retrieval accuracy averaged over both directions."""
    sims, ret = [], []
    for layer in range(a.shape[1]):
        x, y = a[:, layer], b[:, layer]
        sims.append(layer_similarity(x, y, svcca_k, draws, random_seed=layer))
        ret.append((keyed_retrieval_share(x, y, b_keys, b_keys) + keyed_retrieval_share(y, x, a_keys, a_keys)) / 2)
    return sims, ret


# --- running it on a model and a corpus --------------------------------------------------------


def _texts(groups: list[dict[str, list[str]]], lang: str) -> list[str]:
    """The non-empty lines of `lang` in a split, each once, in order."""
    return list(dict.fromkeys(t for g in groups for t in g.get(lang, []) if t.strip()))


def _check_languages(model: Model, languages: Sequence[str] | None) -> list[str]:
    known = list(model.languages.sources)
    langs = list(dict.fromkeys(languages or known))
    unknown = [lang for lang in langs if lang not in known]
    if unknown:
        raise LanguageError(f"the model has no encoder for {', '.join(repr(x) for x in unknown)} "
                            f"(source languages: {', '.join(known)})")
    return langs


def _split_texts(corpus: Path, split: str, langs: list[str], max_sentences: int | None
                 ) -> tuple[list[dict[str, list[str]]], dict[str, list[str]]]:
    from interlingua.evaluation.bleu_matrix import load_split_texts
    groups = load_split_texts(corpus, split, max_sentences)
    texts = {lang: _texts(groups, lang) for lang in langs}
    missing = [lang for lang, t in texts.items() if not t]
    if missing:
        raise DataError(f"split '{split}' of {corpus} has no text in {', '.join(missing)}")
    return groups, texts


def analyze_encoder(model: Model, corpus: str | Path, train_split: str = "val", split: str = "test_2016_flickr",
                    languages: Sequence[str] | None = None, max_sentences: int | None = None,
                    settings: ProbeSettings = ProbeSettings(), batch_size: int = 64,
                    progress: bool = True, checkpoint: str = "", svcca_k: int = SVCCA_K,
                    similarity_draws: int = DRAWS) -> EncoderAnalysis:
    """Every analysis of the module docstring for `model` on `corpus` (probes fit on `train_split`;
    fixed-k SVCCA at `svcca_k` directions, references averaged over `similarity_draws`)."""
    from interlingua.evaluation.bleu_matrix import parallel_texts
    corpus = Path(corpus)
    langs = _check_languages(model, languages)
    _, train_texts = _split_texts(corpus, train_split, langs, max_sentences)
    test_groups, test_texts = _split_texts(corpus, split, langs, max_sentences)
    device = model.device
    token_acc, position_acc, ceiling = {}, {}, {}
    counts: dict[str, dict[str, int]] = {train_split: {}, split: {}}
    outputs: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    pooled: dict[str, dict[str, np.ndarray]] = {}
    depth = 0
    for lang in tqdm(langs, desc="encoder layers", disable=not progress):
        tr = model.encoder_layers(train_texts[lang], lang, batch_size)
        te = model.encoder_layers(test_texts[lang], lang, batch_size)
        tr_ids, te_ids = model.token_ids(train_texts[lang], lang), model.token_ids(test_texts[lang], lang)
        depth = tr[0].shape[0]
        token_acc[lang], position_acc[lang] = layer_probes(tr, tr_ids, te, te_ids, settings, device)
        ceiling[lang] = seen_share(tr_ids, te_ids)
        outputs[lang] = (np.concatenate([s[-1] for s in tr]), np.concatenate([s[-1] for s in te]))
        counts[train_split][lang], counts[split][lang] = len(outputs[lang][0]), len(outputs[lang][1])
        pooled[lang] = {t: s.mean(1) for t, s in zip(test_texts[lang], te) if s.shape[1]}
    result = EncoderAnalysis(checkpoint, model.kinds.encoder, str(corpus), train_split, split, langs,
                             ["emb", *map(str, range(1, depth))], counts, token_acc, position_acc, ceiling,
                             svcca_k=svcca_k, similarity_draws=similarity_draws, probe=asdict(settings))
    for a, b in tqdm(list(combinations(langs, 2)), desc="language pairs", disable=not progress):
        pairs = [(s, t) for s, t in zip(*parallel_texts(test_groups, a, b)) if s in pooled[a] and t in pooled[b]]
        if len(pairs) < 2:
            continue
        a_keys, b_keys = [s for s, _ in pairs], [t for _, t in pairs]
        sims, retrieval = pair_scores(np.stack([pooled[a][s] for s in a_keys]),
                                      np.stack([pooled[b][t] for t in b_keys]), a_keys, b_keys, svcca_k,
                                      similarity_draws)
        result.add_pair(f"{a}-{b}", len(pairs), sims, retrieval)
    if len(langs) > 1:
        acc, confusion = language_id({lang: o[0] for lang, o in outputs.items()},
                                     {lang: o[1] for lang, o in outputs.items()}, settings, device)
        result.language_id_accuracy, result.confusion = acc, confusion.tolist()
    return result


def write_encoder_analysis(result: EncoderAnalysis, out_dir: str | Path) -> list[Path]:
    """encoder_analysis.md / .json, encoder_layers.png and (two or more languages) language_id.png."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = [out / "encoder_analysis.md", out / "encoder_analysis.json"]
    write_text_atomic(files[0], markdown(result))
    write_text_atomic(files[1], json.dumps(result.to_json(), indent=1))
    files.append(plot_layers(result, out / "encoder_layers.png"))
    if result.confusion:
        files.append(plot_confusion(result, out / "language_id.png"))
    return files


def evaluate_encoder(checkpoint: str | Path, out_dir: str | Path, corpus: str | Path | None = None,
                     train_split: str = "val", split: str = "test_2016_flickr", languages: Sequence[str] | None = None,
                     max_sentences: int | None = None, device: str = "auto",
                     progress: bool = True, svcca_k: int = SVCCA_K) -> tuple[EncoderAnalysis, list[Path]]:
    """`interlingua analyze encoder`: load, analyse on `corpus` (default: the one the model was trained on), write."""
    model = load(checkpoint, device)
    result = analyze_encoder(model, corpus or model.config.corpus, train_split, split, languages,
                             max_sentences, progress=progress, checkpoint=str(checkpoint), svcca_k=svcca_k)
    return result, write_encoder_analysis(result, out_dir)


def report_encoder(checkpoint: str | None, model: list[str] | None, train_split: str, max_sentences: int | None,
                   languages: list[str] | None, split: str, corpus: str | None, out: str | None, device: str,
                   svcca_k: int | None = None) -> Report:
    """`interlingua analyze encoder` (`registry.EVALUATIONS`) of one model, given as `checkpoint` or one `--model`:
    written under `out` (default: <checkpoint folder>/analysis); `svcca_k` None: `SVCCA_K`."""
    models = named_checkpoints(model, "encoder", checkpoint)
    if len(models) > 1:
        raise InterlinguaError(f"analyze encoder analyses one model ({len(models)} given): run it once per model")
    checkpoint = str(next(iter(models.values())))
    result, files = evaluate_encoder(checkpoint, Path(out or Path(checkpoint).parent / "analysis"), corpus=corpus,
                                     train_split=train_split, split=split, languages=languages,
                                     max_sentences=max_sentences, device=device, svcca_k=svcca_k or SVCCA_K)
    return Report(markdown(result), result.to_json(), files, result=result)
