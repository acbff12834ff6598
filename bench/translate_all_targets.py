"""One sentence into every target language: a `translate` call per target vs `represent` once + `generate` per target.

Run: python bench/translate_all_targets.py [--model CKPT] [--src en] [--sentences 100] [--beam 1]
     [--reps 3] [--threads 1] [--out bench/results/translate_all_targets.jsonl]
Without --model, nothing is trained: an untrained model of the demo's architecture
(`interlingua.demo.DEMO_CONFIG`: BiLSTM/LSTM 256, attention bridge with 10 heads, 2k BPE for de, en,
fr) is built in process over sentencepiece vocabularies of Multi30k training lines, the way the
tests build their random checkpoints. An untrained decoder seldom ends a sentence, so its outputs
run to the length limit (twice the source + 10 subwords): decoding weighs more than in a trained
model, and the saving measured is the smaller for it.

The first --sentences test_2016_flickr lines in --src go into every target language of the model
but the source (what the service's page asks for one sentence), timed two ways in the same process:
  per_sentence (the page's case): (a) a `translate([s], src, tgt)` call per sentence and target;
               (b) per sentence, `represent([s], src)` once, then `generate(rep, tgt)` per target;
  batched:     (a) `translate(sentences, src, tgt)` per target; (b) `represent(sentences, src)` once,
               then `generate` per target (batch 64).
`represent_alone_s` is the encoding alone (b without its `generate` calls), e: with T targets and g the
generation per target, a / b = T (e + g) / (e + T g), so the saving grows with the targets and with
the encoder's share of a translation.
Both ways give the same translations (checked). Seconds are the median of --reps timed repetitions
after one untimed warm-up, (a) and (b) alternating so that load elsewhere on the machine hits both
alike; `ratio` is a / b of the medians, `ratio_of_best` of the fastest repetitions (the steadier one on
a busy machine). One JSON line (per mode: both ways' seconds and ratios) is printed and appended to --out.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from _results import append_result  # noqa: E402

from interlingua.config import parse_config  # noqa: E402
from interlingua.data.corpus import normalize_line, read_lines  # noqa: E402
from interlingua.data.vocab import Vocab  # noqa: E402
from interlingua.demo import DEMO_CONFIG  # noqa: E402
from interlingua.inference.api import Model, load  # noqa: E402
from interlingua.model_files.checkpoint import build_payload, save_atomic  # noqa: E402
from interlingua.modules.model import TranslationNetwork  # noqa: E402

DEMO_LANGS = ("de", "en", "fr")


def untrained_demo_model(data: Path, folder: Path, vocab_lines: int, seed: int = 0) -> Path:
    """A checkpoint of the demo's architecture with freshly initialised weights and real vocabularies
    (sentencepiece on the first `vocab_lines` Multi30k training lines of each language)."""
    cfg = parse_config({**DEMO_CONFIG, "corpus": str(data / "corpus.yaml"), "work_dir": str(folder)})
    pre = cfg.preprocess
    vocabs = {lang: Vocab.train([normalize_line(s, pre.lowercase, pre.normalize)
                                 for s in read_lines(data / f"train.{lang}.gz")[:vocab_lines]],
                                vocab_size=pre.vocab_size, threads=1)
              for lang in DEMO_LANGS}
    torch.manual_seed(seed)
    net = TranslationNetwork(cfg.model, {lang: len(v) for lang, v in vocabs.items()},
                             list(DEMO_LANGS), list(DEMO_LANGS))
    held_out = {tuple(pair) for pair in DEMO_CONFIG["directions"].get("held_out", [])}
    directions = [(s, t) for s in DEMO_LANGS for t in DEMO_LANGS if (s, t) not in held_out]
    path = folder / "untrained_demo.pt"
    save_atomic(build_payload(cfg, net, vocabs, directions), path)
    return path


def per_target(model: Model, sentences: list[str], src: str, targets: list[str], beam: int,
               per_sentence: bool) -> dict[str, list[str]]:
    """(a): one `translate` call per target (and per sentence)."""
    groups = [[s] for s in sentences] if per_sentence else [sentences]
    return {tgt: [out for group in groups for out in model.translate(group, src, tgt, beam=beam)] for tgt in targets}


def encoded_once(model: Model, sentences: list[str], src: str, targets: list[str], beam: int,
                 per_sentence: bool) -> dict[str, list[str]]:
    """(b): one `represent` (per sentence), then one `generate` per target."""
    out: dict[str, list[str]] = {tgt: [] for tgt in targets}
    for group in ([[s] for s in sentences] if per_sentence else [sentences]):
        rep = model.represent(group, src)
        for tgt in targets:
            out[tgt] += model.generate(rep, tgt, beam=beam)
    return out


def alternating_times(ways: dict[str, Callable[[], object]], reps: int) -> dict[str, list[float]]:
    """Seconds of `reps` timed calls of each way after one untimed warm-up, the ways taking turns."""
    for way in ways.values():
        way()
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(reps):
        for name, way in ways.items():
            t0 = time.perf_counter()
            way()
            times[name].append(time.perf_counter() - t0)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="checkpoint (.pt); default: an untrained model of the demo's architecture")
    ap.add_argument("--src", default="en")
    ap.add_argument("--sentences", type=int, default=100, help="first N test_2016_flickr sentences in --src")
    ap.add_argument("--beam", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--vocab-lines", type=int, default=10_000, help="training lines per language for the "
                                                                    "untrained model's vocabularies")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "translate_all_targets.jsonl"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    data = Path(args.data)
    with tempfile.TemporaryDirectory(prefix="bench-all-targets-") as tmp:
        path = args.model or untrained_demo_model(data, Path(tmp), args.vocab_lines)
        model = load(path, "cpu")
    targets = [t for t in model.languages.targets if t != args.src]
    sentences = read_lines(data / f"test_2016_flickr.{args.src}.gz")[:args.sentences]
    record = {"model": args.model or "untrained, demo architecture (interlingua.demo.DEMO_CONFIG)",
              "src": args.src, "targets": targets, "sentences": len(sentences), "beam": args.beam,
              "threads": args.threads, "reps": args.reps}
    for mode, single in (("per_sentence", True), ("batched", False)):
        a = per_target(model, sentences, args.src, targets, args.beam, single)
        b = encoded_once(model, sentences, args.src, targets, args.beam, single)
        if a != b:
            raise SystemExit(f"{mode}: represent + generate gave other translations than translate")
        times = alternating_times(
            {"a": lambda single=single: per_target(model, sentences, args.src, targets, args.beam, single),
             "b": lambda single=single: encoded_once(model, sentences, args.src, targets, args.beam, single),
             "encode": lambda single=single: encoded_once(model, sentences, args.src, [], args.beam, single)},
            args.reps)
        med = {way: statistics.median(t) for way, t in times.items()}
        record[mode] = {"translate_per_target_s": round(med["a"], 3), "represent_once_s": round(med["b"], 3),
                        "ratio": round(med["a"] / med["b"], 3),
                        "ratio_of_best": round(min(times["a"]) / min(times["b"]), 3),
                        "represent_alone_s": round(med["encode"], 3),
                        "seconds": {way: [round(x, 3) for x in t] for way, t in times.items()}}
    append_result(args.out, record)
    for mode in ("per_sentence", "batched"):
        r = record[mode]
        print(f"{mode}: {r['translate_per_target_s']:.2f} s with a translate call per target, "
              f"{r['represent_once_s']:.2f} s encoding once (medians): {r['ratio']:.2f}x "
              f"({r['ratio_of_best']:.2f}x of the best times)", file=sys.stderr)


if __name__ == "__main__":
    main()
