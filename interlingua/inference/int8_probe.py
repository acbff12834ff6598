"""Whether `precision: auto` runs a loaded model in int8 on this CPU: only where int8 was checked to
translate as well as fp32, once, in a step of its own, *and* it measures faster here. Loading reads no corpus.

The check (`check_int8`, `interlingua check-int8 MODEL`): an int8 copy of the model
(`interlingua.modules.int8.quantize_network`: the layers this machine's kernel plan quantizes) and the fp32
model translate up to DEV_SENTENCES (200) sentence pairs of the corpus's `val` split (the corpus its
checkpoint config names, or another given), shared out over the trained directions (copies left out),
greedy, scored as training validation scores them (lowercased sacreBLEU 13a over all those sentences
together). int8 holds where its dev BLEU is at most MAX_BLEU_DROP (0.3) below fp32's. The result, both
scores and the SHA-256 of the weights measured (`weights_fingerprint`), is written beside the model as
`<file stem or folder name>.int8.json` (`check_path`), as `engine: ctranslate2` keeps its export there.

At load, after `auto` has chosen fp32 or bf16 (the baseline: `runtime.resolve_device_precision`),
`auto_int8` reads that record only:

- no record, an unreadable one, or one of other weights (the file was trained on or replaced since): the
  baseline, and the log says how to check int8;
- a record where int8 lost more than MAX_BLEU_DROP: the baseline;
- a record where int8 held: the model's layer shapes are timed with each int8 kernel against fp32
  (`plan_network`, cached per machine; where no kernel pays at any of them, the baseline with a warning
  that says what was measured, as `precision: int8` would be refused), then an int8 copy against the
  baseline on the model's own greedy and beam search (`decoding_probe`: the same random sources for both,
  the two alternating, medians). int8 only where it is at least MIN_INT8_SPEEDUP times as fast; the
  speed-up is cached in precision.json beside the bf16 one (per CPU model, int8 flags, torch version,
  thread count and model workload).

Where nothing of the model can be quantized (`check_quantizable`: too small, another device), `auto`
keeps the baseline before reading anything.
"""
from __future__ import annotations

import copy
import dataclasses
import datetime
import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from interlingua.atomic_files import write_text_atomic
from interlingua.data.inputs import tokenize_inputs
from interlingua.errors import InterlinguaError
from interlingua.inference.decoding_probe import decode_probe, probe_batch
from interlingua.inference.representation import weights_fingerprint
from interlingua.model_files.load import beside_model, load_model
from interlingua.model_files.loaded import LoadedModel
from interlingua.modules.int8 import check_quantizable, plan_network, quantize_network
from interlingua.modules.model import TranslationNetwork
from interlingua.modules.search import translate_ids
from interlingua.precision import cached_speedup, int8_features, measure_speedup

log = logging.getLogger(__name__)

DEV_SENTENCES = 200
"""Dev sentence pairs the check translates by default (in total, over the trained directions)."""
FEW_DEV_SENTENCES = 50
"""Fewer dev pairs than this (where more were asked for) get a warning: the check is made, but it says little."""
MAX_BLEU_DROP = 0.3
"""int8's dev BLEU may be at most this much below fp32's."""
MIN_INT8_SPEEDUP = 1.1
"""int8 decoding must be at least this much faster than the baseline's (as bf16 must be than fp32)."""

DevText = list[tuple[str, str, list[str], list[str]]]
"""(source language, target language, sources, references) per direction."""


def dev_text(loaded: LoadedModel, limit: int = DEV_SENTENCES, corpus: str | Path | None = None
             ) -> tuple[DevText | None, str]:
    """Up to `limit` dev sentence pairs of the model's trained directions from the `val` split of `corpus`
    (default: the one its config names), shared out over the directions; or None and why there are none."""
    from interlingua.data.corpus import load_corpus, read_group
    corpus = corpus or loaded.config.corpus
    directions = sorted({(s, t) for s, t in loaded.directions if s != t and s in loaded.network.encoder_langs
                         and t in loaded.network.decoder_langs})
    if not directions:
        return None, "the model has no trained translation direction"
    try:
        groups = [read_group(g) for g in load_corpus(corpus).splits.get("val", [])]
    except (InterlinguaError, OSError) as err:
        return None, f"its corpus cannot be read ({err})"
    if not groups:
        return None, f"its corpus {corpus} has no 'val' split"
    per_direction = max(1, limit // len(directions))
    out: DevText = []
    for s, t in directions:
        pairs = [(a, b) for g in groups if s in g and t in g for a, b in zip(g[s], g[t]) if a.strip() and b.strip()]
        pairs = pairs[:per_direction]
        if pairs:
            out.append((s, t, [a for a, _ in pairs], [b for _, b in pairs]))
    if not out:
        return None, f"the 'val' split of {corpus} has no sentence pair of a trained direction"
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


# --- the check, a step of its own ---------------------------------------------------------------------


@dataclass(frozen=True)
class Int8Check:
    """What `check_int8` measured: int8's and fp32's greedy dev BLEU on the same sentences, for the weights
    whose SHA-256 is `weights` (a record of other weights is not read)."""

    holds: bool
    """int8's dev BLEU is at most `max_bleu_drop` below fp32's: `auto` may pick int8 where it is faster."""
    fp32_bleu: float
    int8_bleu: float
    dev_sentences: int
    corpus: str
    """The corpus whose `val` split was translated."""
    weights: str
    """`weights_fingerprint` of the fp32 weights measured."""
    max_bleu_drop: float = MAX_BLEU_DROP
    measured: str = ""
    """When (ISO 8601, local time)."""

    @property
    def why(self) -> str:
        """The numbers behind `holds`, for messages."""
        return (f"dev BLEU int8 {self.int8_bleu:.2f} vs fp32 {self.fp32_bleu:.2f} on {self.dev_sentences} sentences "
                f"(may be at most {self.max_bleu_drop} lower)")

    def write(self, path: Path) -> Path:
        write_text_atomic(path, json.dumps(dataclasses.asdict(self), indent=1) + "\n")
        return path

    @classmethod
    def read(cls, path: Path) -> Int8Check:
        """The record at `path`; `ValueError` / `TypeError` / `OSError` where it is missing or no such record."""
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        check = cls(**data)
        if not (isinstance(check.holds, bool) and isinstance(check.weights, str)):
            raise ValueError("'holds' or 'weights' of the wrong type")
        return check


def check_path(model_path: str | Path) -> Path:
    """Where the int8 check of the model at `model_path` (a .pt file or a model folder) is recorded: beside
    it, `<file stem or folder name>.int8.json`."""
    return beside_model(model_path, ".int8.json")


def check_int8(checkpoint: str | Path, corpus: str | Path | None = None, limit: int = DEV_SENTENCES) -> Int8Check:
    """Measure once whether int8 translates the model at `checkpoint` as well as fp32 (greedy dev BLEU of both
    on up to `limit` `val` pairs of `corpus`, default the model's own corpus) and record it beside the model
    (`check_path`), where `precision: auto` reads it. Runs on the CPU, where int8 runs. Raises
    `InterlinguaError` where there is no dev set or nothing of the model can run in int8 here."""
    loaded = load_model(checkpoint, "cpu")
    dev, why = dev_text(loaded, limit, corpus)
    if dev is None:
        raise InterlinguaError(f"no dev set to check int8's BLEU on: {why}")
    fingerprint = weights_fingerprint(loaded.network)
    quantized = copy.deepcopy(loaded.network)
    quantize_network(quantized)  # refused in one line where int8 cannot run (too small, no kernel pays here)
    sentences = sum(len(d[2]) for d in dev)
    if sentences < min(limit, FEW_DEV_SENTENCES):
        log.warning("only %d dev sentence pair(s) of the model's directions in %s (asked for %d): a BLEU over so few "
                    "moves by points with one sentence, so this check says little; give --corpus with a larger "
                    "'val' split", sentences, corpus or loaded.config.corpus, limit)
    log.info("translating %d dev sentences in fp32 and in int8", sentences)
    fp32_bleu, int8_bleu = dev_bleu(loaded.network, loaded, dev), dev_bleu(quantized, loaded, dev)
    check = Int8Check(holds=math.isfinite(int8_bleu) and int8_bleu >= fp32_bleu - MAX_BLEU_DROP,
                      fp32_bleu=round(fp32_bleu, 2), int8_bleu=round(int8_bleu, 2),
                      dev_sentences=sentences, corpus=str(corpus or loaded.config.corpus),
                      weights=fingerprint, measured=datetime.datetime.now().isoformat(timespec="seconds"))
    check.write(check_path(checkpoint))
    return check


def read_check(model_path: Path | None, fingerprint: Callable[[], str]) -> tuple[Int8Check | None, str]:
    """The recorded int8 check of the model at `model_path` whose weights' fingerprint is `fingerprint()`
    (worked out only where there is a record), or None and why not."""
    how = "`interlingua check-int8 MODEL` measures int8's dev BLEU once and records it"
    if model_path is None:
        return None, "the model was not loaded from a file, so no int8 check is recorded for it"
    path = check_path(model_path)
    if not path.exists():
        return None, f"no int8 check recorded for this model ({path}); {how}"
    try:
        check = Int8Check.read(path)
    except (OSError, ValueError, TypeError) as err:
        return None, f"{path} cannot be read ({err}); {how} again"
    if check.weights != fingerprint():
        return None, f"{path} was measured on other weights than these; {how} again"
    return check, ""


# --- at load: reading the check, timing int8 ---------------------------------------------------------------


def auto_int8(loaded: LoadedModel, baseline: str, workload: str) -> LoadedModel | None:
    """`loaded` with its network quantized where `auto` picks int8 over `baseline`: a recorded check where int8
    holds its dev BLEU (`read_check`) and a decoding speed-up of at least MIN_INT8_SPEEDUP here; else None.
    Reads no corpus. Timing needs the fp32 network and an int8 copy side by side for a moment; the fp32 one
    is dropped (by the caller) once int8 is chosen."""
    network = loaded.network
    try:
        check_quantizable(network)
    except InterlinguaError as err:  # another device, nothing big enough to quantize
        log.info("precision auto: int8 not considered: %s", err)
        return None
    check, why = read_check(loaded.provenance.source, lambda: weights_fingerprint(network))
    if check is None:
        log.info("precision auto: %s, int8 not considered: %s", baseline, why)
        return None
    if not check.holds:
        log.info("precision auto: %s, not int8: its check found %s", baseline, check.why)
        return None
    try:
        plan = plan_network(network)
    except InterlinguaError as err:  # no int8 kernel works in this torch build
        log.info("precision auto: int8 not considered: %s", err)
        return None
    refusal = plan.refusal()
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
    try:
        # the kernels in the key: a speed-up measured with other kernels (an older plan) is measured again
        speedup = cached_speedup(f"{workload} | int8 vs {baseline} | {plan.describe()}",
                                 lambda: int8_speedup(network, baseline, int8_network(), len(loaded.vocabs[first])),
                                 int8_features(), what=f"int8 (against {baseline})")
        if speedup < MIN_INT8_SPEEDUP:
            log.info("precision auto: %s, not int8: int8 decoding %.2fx the speed of %s here (needs %sx)", baseline,
                     speedup, baseline, MIN_INT8_SPEEDUP)
            return None
        log.info("precision auto: int8 (decoding %.2fx the speed of %s here; its check found %s)", speedup,
                 baseline, check.why)
        if quantized is None:  # the speed-up was cached: quantize the loaded network itself, no copy
            quantize_network(network)
            return loaded
    except InterlinguaError as err:  # no int8 kernel works here
        log.info("precision auto: int8 not considered: %s", err)
        return None
    return dataclasses.replace(loaded, network=quantized)
