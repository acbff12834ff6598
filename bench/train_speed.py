"""Training throughput of interlingua at paper sizes (en->de, batch 64), tokens/s and peak memory.

Run: python bench/train_speed.py --steps 300 [--bridge none] [--input-feed] [--precision fp32]
     [--softmax-sample 1024]
The peer's figure comes from `bash ../shared/peers/opennmt.sh bench` run in the same session.
"""
from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _results import append_result  # noqa: E402

from interlingua.config import load_config  # noqa: E402
from interlingua.data.download import get_multi30k  # noqa: E402
from interlingua.training.trainer import Trainer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--bridge", default="attention", choices=["attention", "none"])
    ap.add_argument("--input-feed", action="store_true")
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--softmax-sample", type=int, default=0, help="train.softmax_sample (0: full softmax)")
    ap.add_argument("--work", default=str(ROOT / "runs" / "bench_speed"))
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    ap.add_argument("--out", default=None, help="append a JSON line with the result here")
    args = ap.parse_args()

    corpus = get_multi30k(Path(args.work) / "multi30k", args.data)
    tag = (f"{args.bridge}{'_if' if args.input_feed else ''}_{args.precision}"
           f"{f'_sample{args.softmax_sample}' if args.softmax_sample else ''}")
    cfg = load_config(ROOT / "recipes" / "paper_bilingual_en_de.yaml", [
        f"corpus={corpus}", f"work_dir={Path(args.work) / tag}", f"model.bridge.type={args.bridge}",
        f"model.decoder.input_feed={str(args.input_feed).lower()}", f"train.precision={args.precision}",
        f"train.softmax_sample={args.softmax_sample}",
        f"train.max_steps={args.steps}", f"train.valid_every={args.steps + 1}", "train.log_every=25",
        "preprocess.max_valid_sentences=8", "train.threads=2"])
    import shutil
    shutil.rmtree(cfg.work_dir / "last.pt", ignore_errors=True)
    for f in ("last.pt", "best.pt", "metrics.jsonl"):
        (cfg.work_dir / f).unlink(missing_ok=True)
    trainer = Trainer(cfg)
    t0 = time.time()
    trainer.train()
    wall = time.time() - t0
    recs = [json.loads(x) for x in (cfg.work_dir / "metrics.jsonl").read_text().splitlines()]
    rates = [r["tokens_per_s"] for r in recs if r["type"] == "train" and r["step"] > args.warmup]
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    result = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": f"{platform.node()} {platform.processor() or platform.machine()}",
              "config": tag, "precision": trainer.precision, "steps": args.steps,
              "src_plus_tgt_tokens_per_s_median": round(statistics.median(rates)),
              "peak_rss_gib": round(peak_gib, 2), "wall_s": round(wall, 1),
              "command": " ".join(sys.argv)}
    append_result(args.out, result)


if __name__ == "__main__":
    main()
