"""What growth costs: preparation and the first training steps at 200,000 and 2,000,000 sentence pairs.

Run: python bench/prepare_scale.py [--sizes 200000 2000000] [--steps 200] [--vocab-sample N]
     [--out bench/results/prepare_scale.jsonl]

A synthetic de-en corpus is built from Multi30k (../shared/data/multi30k, or --data): each line
joins two random training captions, the same two on both sides, so every size has real,
aligned text with Multi30k's vocabulary; it is trained in two directions (de->en, en->de),
validated on Multi30k val. For each size, `interlingua prepare` and then `interlingua train`
(--steps steps of a 256-unit LSTM bridge model, batch 64, 2 threads) run as child processes,
and their wall time and peak resident memory (ru_maxrss) are recorded, with the size of the
prepared id files on disk and training tokens/s from metrics.jsonl. Memory should stay flat
in corpus size apart from per-line index arrays; preparation time should grow linearly.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _results import append_result  # noqa: E402

from interlingua.data.corpus import load_corpus, read_group, write_corpus_yaml  # noqa: E402
from interlingua.data.download import get_multi30k  # noqa: E402
from interlingua.training.metrics import MetricsLog  # noqa: E402

THREADS = 2


def build_corpus(multi30k: Path, pairs: int, folder: Path, seed: int = 1) -> Path:
    """`pairs` de-en lines, each two random Multi30k captions joined, plus Multi30k val."""
    corpus = load_corpus(multi30k)
    train = read_group(corpus.groups("train")[0])
    folder.mkdir(parents=True, exist_ok=True)
    done = folder / "corpus.yaml"
    if done.is_file():
        return done
    rng = random.Random(seed)
    n = len(train["en"])
    with gzip.open(folder / "train.de.gz", "wt", encoding="utf-8", compresslevel=1) as de, \
            gzip.open(folder / "train.en.gz", "wt", encoding="utf-8", compresslevel=1) as en:
        for _ in range(pairs):
            a, b = rng.randrange(n), rng.randrange(n)
            de.write(f"{train['de'][a]} {train['de'][b]}\n")
            en.write(f"{train['en'][a]} {train['en'][b]}\n")
    val = {g.name: g for g in corpus.groups("val")}["multiway"].files
    spec = {"name": f"synthetic_{pairs}", "languages": ["de", "en"],
            "splits": {"val": {"de": str(val["de"]), "en": str(val["en"])}},
            "pairs": {"train": {"de-en": {"de": "train.de.gz", "en": "train.en.gz"}}}}
    return write_corpus_yaml(folder, spec)  # written last, whole or not at all: it marks the corpus as built


def config(corpus: Path, work: Path, steps: int, vocab_sample: int | None) -> Path:
    cfg = {
        "name": work.name, "corpus": str(corpus), "work_dir": str(work),
        "preprocess": {"vocab_size": 8000, "max_len": 100, "max_valid_sentences": 100, "workers": THREADS,
                       **({"vocab_sample": vocab_sample} if vocab_sample else {})},
        "directions": {"mode": "explicit", "pairs": [["de", "en"], ["en", "de"]]},
        "model": {"embed_dim": 256, "encoder": {"layers": 1, "hidden": 256},
                  "bridge": {"type": "attention", "heads": 10, "hidden": 256},
                  "decoder": {"layers": 1, "hidden": 256}, "dropout": 0.1},
        "train": {"optimizer": "adam", "lr": 0.001, "batch_size": 64, "max_steps": steps, "valid_every": steps + 1,
                  "log_every": 25, "threads": THREADS, "seed": 1},
    }
    path = work.parent / f"{work.name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def run_child(args: list[str]) -> dict:
    """Wall seconds and peak RSS (MiB) of one child process (its own rusage, from wait4)."""
    start = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                            env={**os.environ, "OMP_NUM_THREADS": str(THREADS), "TQDM_DISABLE": "1"})
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{' '.join(args)} failed with exit code {proc.returncode}")
    return {"seconds": round(time.perf_counter() - start, 1), "peak_rss_mib": round(usage.ru_maxrss / 1024, 1)}


def measure(size: int, multi30k: Path, work: Path, steps: int, vocab_sample: int | None) -> dict:
    corpus = build_corpus(multi30k, size, work / f"corpus_{size}")
    run = work / f"run_{size}" if vocab_sample is None else work / f"run_{size}_sample{vocab_sample}"
    shutil.rmtree(run, ignore_errors=True)  # a fresh run: cold cache, no checkpoint to refuse
    cfg = config(corpus, run, steps, vocab_sample)
    # one process per stage and size, so each peak RSS is that stage's own
    prep = run_child([sys.executable, "-m", "interlingua.cli", "prepare", str(cfg), "--force"])
    encoded = run / "data" / "encoded"
    disk = sum(f.stat().st_size for f in encoded.iterdir())
    cleaning = json.loads((run / "data" / "cleaning.json").read_text())
    train = run_child([sys.executable, "-m", "interlingua.cli", "train", str(cfg)])
    rates = [r["tokens_per_s"] for r in MetricsLog(run).records() if r.get("type") == "train" and r["step"] > 50]
    return {"pairs_per_direction": size, "directions": 2, "vocab_sample": vocab_sample or "default", "prepare": prep,
            "encoded_mib_on_disk": round(disk / 2**20, 1), "kept_lines": cleaning["train"]["de-en"]["kept"],
            "train_steps": steps, "train": train,
            "train_tokens_per_s": round(sum(rates) / len(rates)) if rates else None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[200_000, 2_000_000])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--vocab-sample", type=int, default=None,
                   help="preprocess.vocab_sample (default: the toolkit's); below the smallest size, the "
                        "sentencepiece sample is the same for every size and the rest of the cost shows alone")
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    p.add_argument("--work", default=str(ROOT / "runs" / "bench_prepare_scale"))
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "prepare_scale.jsonl"))
    args = p.parse_args()
    work = Path(args.work)
    multi30k = get_multi30k(work / "multi30k", args.data)
    results = []
    for size in sorted(args.sizes):
        rec = measure(size, multi30k, work, args.steps, args.vocab_sample)
        results.append(rec)
        append_result(args.out, rec)
    if len(results) > 1:
        small, big = results[0], results[-1]
        growth = big["pairs_per_direction"] / small["pairs_per_direction"]
        append_result(args.out, {
            "summary": f"{growth:.0f}x the pairs", "vocab_sample": args.vocab_sample or "default",
            "prepare_time_ratio": round(big["prepare"]["seconds"] / small["prepare"]["seconds"], 2),
            "prepare_peak_rss_ratio": round(big["prepare"]["peak_rss_mib"] / small["prepare"]["peak_rss_mib"], 2),
            "train_peak_rss_ratio": round(big["train"]["peak_rss_mib"] / small["train"]["peak_rss_mib"], 2),
            "train_tokens_per_s_ratio": round(big["train_tokens_per_s"] / small["train_tokens_per_s"], 2),
        })


if __name__ == "__main__":
    main()
