"""Dev-set evaluation during training: teacher-forced loss and greedy BLEU per direction.

An empty dev file is refused before training (`check_dev_files`): it is a failed download or a
wrong path far more often than a wish to train without validation, which leaving out the 'val'
split says. A direction the dev files give no sentence pair for is warned about once and left
out of the records; where no trained direction is left, the mean BLEU and loss are null.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from sacrebleu.metrics import BLEU, CHRF

from interlingua.data.batching import make_batch
from interlingua.data.corpus import load_corpus
from interlingua.data.directions import Direction, direction_name
from interlingua.data.prepare import PreparedData, direction_pairs, direction_references
from interlingua.data.vocab import Vocab, decoder_start, source_prefix
from interlingua.errors import DataError
from interlingua.modules.model import TranslationNetwork
from interlingua.modules.search import translate_ids
from interlingua.records import DevScores, Validation

log = logging.getLogger(__name__)


@dataclass
class DevSet:
    src_lang: str
    tgt_lang: str
    src: list[np.ndarray]
    tgt: list[np.ndarray]
    references: list[str]
    """Target lines as the corpus holds them (what BLEU is scored against), aligned with `tgt`."""


def corpus_scores(hypotheses: list[str], references: list[str]) -> tuple[float, float]:
    """Lowercased sacreBLEU (13a) and chrF, as the papers report them."""
    bleu = BLEU(lowercase=True, tokenize="13a").corpus_score(hypotheses, [references]).score
    chrf = CHRF(lowercase=True).corpus_score(hypotheses, [references]).score
    return bleu, chrf


@torch.inference_mode()
def translate_devset(network: TranslationNetwork, dev: DevSet, vocabs: dict[str, Vocab], batch_size: int = 128,
                     beam: int = 1, max_len: int = 100) -> list[str]:
    """The model's translations of the dev sources (greedy, or beam search), in their order."""
    return translate_ids(network, vocabs, dev.src, dev.src_lang, dev.tgt_lang, batch_size=batch_size,
                         beam=beam, max_len_cap=max_len)


@torch.inference_mode()
def evaluate_devset(network: TranslationNetwork, dev: DevSet, vocabs: dict[str, Vocab], batch_size: int = 128,
                    beam: int = 1, max_len: int = 100) -> DevScores:
    """Teacher-forced loss on the (subword) dev pairs; BLEU and chrF of the translations against
    `dev.references`, the corpus's own target lines."""
    network.eval()
    prefix = source_prefix(vocabs[dev.src_lang], dev.tgt_lang, network.cfg.shared, network.cfg.tag_position)
    start = decoder_start(vocabs[dev.tgt_lang], dev.tgt_lang, network.cfg.shared, network.cfg.tag_position)
    nll, ntok = 0.0, 0
    for first in range(0, len(dev.src), batch_size):
        b = make_batch(dev.src[first:first + batch_size], dev.tgt[first:first + batch_size], dev.src_lang, dev.tgt_lang,
                       prefix, start)
        out = network(b)
        nll += out.nll_sum
        ntok += out.n_tokens
    hyps = translate_devset(network, dev, vocabs, batch_size, beam, max_len)
    bleu, chrf = corpus_scores(hyps, dev.references)
    loss = nll / max(ntok, 1)
    return DevScores(loss=loss, ppl=float(np.exp(min(loss, 50))), bleu=bleu, chrf=chrf)


def build_devsets(data: PreparedData, directions: list[Direction], zero_shot: list[Direction], limit: int | None,
                  max_len: int) -> dict[Direction, DevSet]:
    """The dev set of every trained and zero-shot direction (copies excluded), scored against the
    corpus's own target lines as the test-set evaluation scores them."""
    if "val" not in data.splits:
        log.warning("the corpus has no 'val' split: no dev evaluation, the last checkpoint is also the best")
        return {}
    dev, rebuilt, without = {}, [], []
    for d in directions + zero_shot:
        if d[0] == d[1]:
            continue
        src, tgt = direction_pairs(data, "val", *d, limit=limit)
        if not src:
            without.append(f"{d[0]}->{d[1]}{' (zero-shot)' if d in zero_shot else ''}")
            continue
        refs = direction_references(data, "val", *d, limit=limit)
        if refs is None:
            refs = [data.vocabs[d[1]].decode(t.tolist()) for t in tgt]
            rebuilt.append(direction_name(d))
        dev[d] = DevSet(d[0], d[1], list(src), list(tgt), refs)
    if rebuilt:
        log.warning("the prepared data keeps no raw validation text: dev BLEU of %s is computed on references "
                    "rebuilt from subword ids cut to max_len=%d", ", ".join(rebuilt), max_len)
    if without:
        trained = any(d[0] != d[1] and d not in zero_shot for d in dev)
        log.warning("the 'val' split has no sentence pair (both sides non-empty) for %s: not validated%s",
                    ", ".join(without), "" if trained else "; with no trained direction validated, the mean dev "
                    "BLEU is logged as null and the last checkpoint is also the best")
    return dev


def check_dev_files(data: PreparedData, corpus_path: str | Path) -> None:
    """Refuse a 'val' file group of the run's languages that has no lines, naming its files."""
    empty = [g.name for g in data.splits.get("val", []) if len(g) == 0]
    if not empty:
        return
    corpus = load_corpus(corpus_path)
    files = [str(path) for g in corpus.splits.get("val", []) if g.name in empty
             for lang, path in sorted(g.files.items()) if lang in data.languages]
    raise DataError(f"empty dev file(s) in corpus {corpus.source}: {', '.join(files) or ', '.join(empty)}; put the "
                    "dev sentences there, or remove the 'val' split to train without validation")


def validate(network: TranslationNetwork, devsets: dict[Direction, DevSet], vocabs: dict[str, Vocab],
             zero_shot: list[Direction], step: int, autocast: Callable[[], AbstractContextManager], *,
             beam: int, max_len: int, zero_resource: Collection[Direction] = (),
             select_zero_resource: bool = False) -> Validation:
    """The validation record of `step`: per-direction dev scores; the mean BLEU and mean loss of the
    trained directions (zero-shot ones are reported, never selected on; None where no trained
    direction has dev sentences). `zero_resource`: the zero-shot directions trained on synthetic pairs
    (`train.synthetic`), marked so, and counted in the means with `select_zero_resource`. Leaves the
    model in train mode."""
    results = {}
    for d, dev in devsets.items():
        with autocast():
            scores = evaluate_devset(network, dev, vocabs, beam=beam, max_len=max_len)
        results[direction_name(d)] = replace(scores, zero_shot=d in zero_shot, zero_resource=d in zero_resource)
    network.train()
    return _with_means(Validation(step=step, directions=results), select_zero_resource)


def _with_means(rec: Validation, select_zero_resource: bool) -> Validation:
    """`rec` with the mean BLEU and loss of the directions a run selects on: the trained ones, and with
    `select_zero_resource` those trained on synthetic pairs."""
    selected = [s for s in rec.directions.values() if not s.zero_shot or (select_zero_resource and s.zero_resource)]
    mean_bleu = float(np.mean([s.bleu for s in selected])) if selected else None
    losses = [s.loss for s in selected if s.loss is not None]  # None: stored not finite
    mean_loss = float(np.mean(losses)) if selected and len(losses) == len(selected) else None
    return replace(rec, mean_bleu=mean_bleu, mean_loss=mean_loss)


def rescored(rec: Validation, zero_resource: Collection[Direction], select_zero_resource: bool) -> Validation:
    """A stored record as this run would have scored it: its zero-shot directions marked by this run's
    `zero_resource` and its means taken over what this run selects on. A run resumed with another
    `train.synthetic` (fine-tuning a control with made pairs) compares its validations with its past ones
    on one scale: best.pt, patience and checkpoint averaging would otherwise weigh means of different
    directions against each other (a mean over 6 supervised directions beats every mean over 12)."""
    if not rec.directions:  # nothing per direction to score again (hand-made or older records)
        return rec
    names = {direction_name(d) for d in zero_resource}
    directions = {name: replace(s, zero_resource=s.zero_shot and name in names) for name, s in rec.directions.items()}
    return _with_means(replace(rec, directions=directions), select_zero_resource)
