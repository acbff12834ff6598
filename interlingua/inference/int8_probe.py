"""Whether `precision: auto` runs a loaded model in int8 on this CPU: only where it is measured faster
*and* translates as well.

After `auto` has chosen fp32 or bf16 (the baseline: `runtime.resolve_device_precision`), an int8
copy of the model (`interlingua.modules.int8.quantize_network`) is timed against the baseline on the
model's own greedy and beam search (`decoding_probe`: the same random sources for both, the two
alternating, medians). Only where int8 is at least MIN_INT8_SPEEDUP times as fast are both
translated on the model's dev set: up to DEV_SENTENCES (200) sentence pairs of the corpus's `val`
split that its checkpoint config names, shared out over the trained directions (copies left out),
greedy, scored as training validation scores them (lowercased sacreBLEU 13a over all those
sentences together). int8 is chosen only where its dev BLEU is at most MAX_BLEU_DROP (0.3) below
fp32's. The decision, with the speed-up and both BLEU scores, is cached in precision.json beside the
bf16 one (per CPU model, int8 flags, torch version, thread count and model workload).

First, the model's layer shapes are timed with each int8 kernel against fp32 (`plan_network`, cached
per machine): where no kernel pays at any of them, `auto` keeps the baseline with a warning that says
what was measured (as `precision: int8` would be refused), before anything else is timed.

Where no dev set can be read (the corpus file moved, no `val` split, no pair for a trained direction)
`auto` never picks int8 and measures nothing (the dev set is looked for first); that is logged and
not cached (the dev set may be there next time). Where nothing of the model can be quantized
(`check_quantizable`: too small, another device), likewise.
"""
from __future__ import annotations

import copy
import dataclasses
import datetime
import logging
import math
from collections.abc import Callable
from typing import Any

import torch

from interlingua.data.inputs import tokenize_inputs
from interlingua.errors import InterlinguaError
from interlingua.inference.decoding_probe import decode_probe, probe_batch
from interlingua.model_files.loaded import LoadedModel
from interlingua.modules.int8 import check_quantizable, plan_network, quantize_network
from interlingua.modules.model import TranslationNetwork
from interlingua.modules.search import translate_ids
from interlingua.precision import _machine_key, _read_cache, _write_cache, cache_path, int8_features, measure_speedup

log = logging.getLogger(__name__)

DEV_SENTENCES = 200
"""Dev sentence pairs the BLEU gate translates (in total, over the trained directions)."""
MAX_BLEU_DROP = 0.3
"""int8's dev BLEU may be at most this much below fp32's."""
MIN_INT8_SPEEDUP = 1.1
"""int8 decoding must be at least this much faster than the baseline's (as bf16 must be than fp32)."""

DevText = list[tuple[str, str, list[str], list[str]]]
"""(source language, target language, sources, references) per direction."""


def dev_text(loaded: LoadedModel, limit: int = DEV_SENTENCES) -> tuple[DevText | None, str]:
    """Up to `limit` dev sentence pairs of the model's trained directions from its corpus's `val` split,
    shared out over the directions; or None and why there are none."""
    from interlingua.data.corpus import load_corpus, read_group
    directions = sorted({(s, t) for s, t in loaded.directions if s != t and s in loaded.network.encoder_langs
                         and t in loaded.network.decoder_langs})
    if not directions:
        return None, "the model has no trained translation direction"
    try:
        corpus = load_corpus(loaded.config.corpus)
        groups = [read_group(g) for g in corpus.splits.get("val", [])]
    except (InterlinguaError, OSError) as err:
        return None, f"its corpus cannot be read ({err})"
    if not groups:
        return None, f"its corpus {loaded.config.corpus} has no 'val' split"
    per_direction = max(1, limit // len(directions))
    out: DevText = []
    for s, t in directions:
        pairs = [(a, b) for g in groups if s in g and t in g for a, b in zip(g[s], g[t]) if a.strip() and b.strip()]
        pairs = pairs[:per_direction]
        if pairs:
            out.append((s, t, [a for a, _ in pairs], [b for _, b in pairs]))
    if not out:
        return None, f"the 'val' split of {loaded.config.corpus} has no sentence pair of a trained direction"
    return out, ""


@torch.inference_mode()
def dev_bleu(network: TranslationNetwork, loaded: LoadedModel, dev: DevText) -> float:
    """Greedy BLEU (lowercased sacreBLEU 13a, as training validation's `corpus_scores`) of `network` on all of
    `dev` at once."""
    from sacrebleu.metrics import BLEU
    hyps: list[str] = []
    refs: list[str] = []
    pre = loaded.config.preprocess
    for s, t, sources, references in dev:
        seqs = tokenize_inputs(sources, loaded.vocabs[s], pre)
        hyps += translate_ids(network, loaded.vocabs, seqs, s, t, batch_size=64, max_len_cap=4 * pre.max_len)
        refs += references
    return float(BLEU(lowercase=True, tokenize="13a").corpus_score(hyps, [refs]).score)


def int8_speedup(baseline: TranslationNetwork, baseline_precision: str, int8: TranslationNetwork,
                 source_vocab_size: int, steps: int = 3) -> float:
    """Baseline time / int8 time of the decoding probe (greedy and beam 5 of the same random sources)."""
    batch = probe_batch(baseline, source_vocab_size)

    def run(which: str) -> None:
        with torch.inference_mode():
            if which == "int8":
                decode_probe(int8, batch, "fp32")  # no autocast: the int8 network computes in its own precisions
            else:
                decode_probe(baseline, batch, baseline_precision)

    return measure_speedup(run, steps, pair=("baseline", "int8"))


def decide_int8(baseline: str, workload: str, speed: Callable[[], float], bleu: Callable[[], tuple[float, float, int]],
                has_dev: Callable[[], bool] = lambda: True) -> bool:
    """Whether `auto` picks int8 over `baseline` for `workload`: the cached decision; else, where `has_dev()`
    (a dev set to check BLEU on: without one never int8, and nothing is cached, as the dev set may be
    readable next time), `speed()` (the int8 speed-up over the baseline) and, only where it reaches
    MIN_INT8_SPEEDUP, `bleu()` (fp32 BLEU, int8 BLEU, sentences on the dev set)."""
    key = _machine_key(int8_features(), f"{workload} | int8 vs {baseline}")
    path = cache_path()
    cached = _read_cache(path)
    entry = cached.get(key)
    if isinstance(entry, dict) and isinstance(entry.get("int8"), bool):
        log.info("precision auto: int8 %s (cached in %s: %s)", "chosen" if entry["int8"] else "not chosen", path,
                 entry.get("why", ""))
        return entry["int8"]
    if not has_dev():
        return False
    log.info("measuring whether int8 decodes faster than %s here for %s (once per machine)", baseline, workload)
    speedup = speed()
    record: dict[str, Any] = {"speedup": round(speedup, 3),
                              "measured": datetime.datetime.now().isoformat(timespec="seconds")}
    if speedup < MIN_INT8_SPEEDUP:
        record.update(int8=False, why=f"int8 decoding {speedup:.2f}x the speed of {baseline} "
                                      f"(needs {MIN_INT8_SPEEDUP}x)")
    else:
        fp32_bleu, int8_bleu, sentences = bleu()
        ok = int8_bleu >= fp32_bleu - MAX_BLEU_DROP and math.isfinite(int8_bleu)
        record.update(int8=ok, fp32_bleu=round(fp32_bleu, 2), int8_bleu=round(int8_bleu, 2),
                      dev_sentences=sentences,
                      why=f"int8 decoding {speedup:.2f}x the speed of {baseline}; dev BLEU int8 {int8_bleu:.2f} vs "
                          f"fp32 {fp32_bleu:.2f} on {sentences} sentences (may be at most {MAX_BLEU_DROP} lower)")
    cached[key] = record
    _write_cache(path, cached)
    log.info("precision auto: int8 %s (%s; cached in %s)", "chosen" if record["int8"] else "not chosen",
             record["why"], path)
    return bool(record["int8"])


def auto_int8(loaded: LoadedModel, baseline: str, workload: str) -> LoadedModel | None:
    """`loaded` with its network quantized where `auto` picks int8 over `baseline` (`decide_int8`), else None.
    Probing needs the fp32 network and an int8 copy side by side for a moment; the fp32 one is dropped
    (by the caller) once int8 is chosen."""
    network = loaded.network
    try:
        check_quantizable(network)
    except InterlinguaError as err:  # another device, nothing big enough to quantize
        log.info("precision auto: int8 not considered: %s", err)
        return None
    try:
        refusal = plan_network(network).refusal()
    except InterlinguaError as err:  # no int8 kernel works in this torch build
        log.info("precision auto: int8 not considered: %s", err)
        return None
    if refusal is not None:
        log.warning("precision auto: %s, not int8: %s", baseline, refusal)
        return None
    quantized: TranslationNetwork | None = None

    def int8_network() -> TranslationNetwork:
        nonlocal quantized
        if quantized is None:
            candidate = copy.deepcopy(network)
            quantize_network(candidate)
            quantized = candidate
        return quantized

    first = network.encoder_langs[0]

    def speed() -> float:
        return int8_speedup(network, baseline, int8_network(), len(loaded.vocabs[first]))

    dev: DevText | None = None

    def has_dev() -> bool:
        nonlocal dev
        dev, why = dev_text(loaded)
        if dev is None:
            log.info("precision auto: int8 not considered: no dev set to check its BLEU on (%s)", why)
        return dev is not None

    def bleu() -> tuple[float, float, int]:
        assert dev is not None
        return dev_bleu(network, loaded, dev), dev_bleu(int8_network(), loaded, dev), sum(len(d[2]) for d in dev)

    try:
        if not decide_int8(baseline, workload, speed, bleu, has_dev):
            return None
        if quantized is None:  # decided from the cache: quantize the loaded network itself, no copy
            quantize_network(network)
            return loaded
    except InterlinguaError as err:  # no int8 kernel works here
        log.info("precision auto: int8 not considered: %s", err)
        return None
    return dataclasses.replace(loaded, network=quantized)
