"""Transformer training speed, ours and OpenNMT-py's of the same size on the same en->de Multi30k data, timed alike.

Run: python bench/transformer_vs_peer.py --steps 300 --rounds 3 [--warmup 50] [--log-every 25]
     [--out bench/results/transformer_vs_peer.jsonl]

Ours: recipes/multi30k/cpu/zero_shot/baseline.yaml made bilingual en->de (`our_overrides`, written
to <work>/ours_config.yaml): pre-norm Transformer, d_model 128, feed-forward 512, 4 heads, 5 encoder
/ 2 decoder layers, sinusoidal positions, tied decoder embeddings, dropout 0.2, label smoothing 0.1,
Adam with inverse-sqrt warm-up, joint cased sentencepiece vocabulary of 8000 over en+de, batches of
64 pairs, fp32. The peer: OpenNMT-py 3.5.1 (`../shared/peers/opennmt.sh setup`) with
bench/opennmt_transformer.yaml, the same sizes; it trains on exactly our subword sequences (our
prepared en->de train split written out as pieces, max_len truncation included) with our
vocabulary's pieces as its vocabulary, so both sides see the same tokens and have the same output
layer (8000 rows).

Each round runs the peer, then ours, one after the other, each in a fresh process for `--steps`
steps with 2 threads, so that drift in the machine's speed hits both sides alike. Both are timed
from wall-clock stamps on their own log lines every `--log-every` steps (bench/_timing.py:
OpenNMT-py's timestamped `Step` reports, our metrics records stamped by train_logged.py), over
the intervals after `--warmup` steps: steps/s, sentences/s and src+tgt tokens/s. Tokens are
counted alike: source subwords (no BOS/EOS on either side) + target subwords + EOS, padding
excluded, which is what both log (OpenNMT-py's src/tgt tok/s; our `tokens_per_s`). Peak RSS is
each training process's maximum resident set (from wait4). Per side the figures are the median
over rounds; ratios are ours / peer, of those medians and per round. One JSON line goes to --out;
the peer's step lines are copied beside it (opennmt_transformer_<date>_<time>_round<r>.log).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _peer  # noqa: E402
from _results import append_result  # noqa: E402
from _timing import onmt_marks, our_marks, window_rates  # noqa: E402

from interlingua.config import apply_override, load_config  # noqa: E402
from interlingua.data.prepare import direction_pairs, prepare  # noqa: E402
from interlingua.data.vocab import EOS  # noqa: E402

THREADS = 2
"""torch threads of each side (`--threads`)."""
SRC, TGT = "en", "de"
RECIPE = ROOT / "recipes" / "multi30k" / "cpu" / "zero_shot" / "baseline.yaml"
PEER_CONFIG = ROOT / "bench" / "opennmt_transformer.yaml"
METRICS = ("steps_per_s_median", "steps_per_s_window", "sent_per_s_window",
           "src_plus_tgt_tokens_per_s_median", "src_plus_tgt_tokens_per_s_window")


def our_overrides(args: argparse.Namespace) -> list[str]:
    """The recipe made bilingual en->de, trained for `--steps` steps with one validation at the end."""
    return [f"corpus={Path(args.corpus).resolve()}", f"work_dir={Path(args.work).resolve() / 'ours'}",
            "directions.mode=bilingual", f"directions.pairs=[[{SRC},{TGT}]]", f"directions.languages=[{SRC},{TGT}]",
            f"train.max_steps={args.steps}", "train.max_minutes=null", f"train.valid_every={args.steps + 1}",
            "train.average_best=0", f"train.log_every={args.log_every}", f"train.threads={THREADS}",
            f"train.precision={args.precision}", "train.device=cpu", "preprocess.max_valid_sentences=8"]


def trained_precision(log: Path) -> str:
    """The precision one of our runs trained in, as bench/train_logged.py printed it in `log` (`auto` resolved)."""
    text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
    match = re.search(r"training precision: (\w+)", text)
    return match.group(1) if match else "unknown"


def write_our_config(args: argparse.Namespace) -> Path:
    """The recipe with `our_overrides` applied, as one YAML file in --work (what each of our runs trains)."""
    data = yaml.safe_load(RECIPE.read_text(encoding="utf-8"))
    for item in our_overrides(args):
        apply_override(data, item)
    path = Path(args.work).resolve() / "ours_config.yaml"
    path.write_text(f"# {RECIPE.relative_to(ROOT)} with: {' '.join(our_overrides(args)[2:])}\n"
                    + yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def write_peer_data(args: argparse.Namespace, dest: Path) -> dict:
    """Our prepared en->de train/val pairs as sentencepiece pieces, and our vocabulary's pieces
    (the specials left to OpenNMT-py, which adds its own four) as the peer's vocabulary."""
    data = prepare(load_config(write_our_config(args)))
    vocab = data.vocabs[SRC]
    if vocab is not data.vocabs[TGT]:
        raise SystemExit("expected one joint vocabulary for en and de")
    pieces = [vocab.id_to_piece(i) for i in range(len(vocab))]
    bad = [p for p in pieces[EOS + 1:] if not p or any(c.isspace() for c in p)]
    if bad:
        raise SystemExit(f"pieces with white space cannot be written for OpenNMT-py: {bad[:5]}")
    dest.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split in ("train", "val"):
        src, tgt = direction_pairs(data, split, SRC, TGT)
        for lang, seqs in ((SRC, src), (TGT, tgt)):
            (dest / f"{split}.{lang}").write_text("".join(" ".join(pieces[i] for i in s) + "\n" for s in seqs),
                                                  encoding="utf-8")
        counts[split] = (len(src), sum(map(len, src)), sum(map(len, tgt)) + len(tgt))
    (dest / "vocab").write_text("".join(p + "\n" for p in pieces[EOS + 1:]), encoding="utf-8")
    n, src_tok, tgt_tok = counts["train"]
    return {"vocab_size": len(vocab), "train_pairs": n,
            "train_src_plus_tgt_tokens_per_pair": round((src_tok + tgt_tok) / n, 2)}


def write_peer_config(args: argparse.Namespace, data_dir: Path, run_dir: Path) -> Path:
    """bench/opennmt_transformer.yaml with this run's data, vocabulary, steps and report interval."""
    cfg = yaml.safe_load(PEER_CONFIG.read_text(encoding="utf-8"))
    vocab = str(data_dir / "vocab")
    cfg.update({
        "src_vocab": vocab, "tgt_vocab": vocab, "src_vocab_size": 8192, "tgt_vocab_size": 8192,
        "data": {"train": {"path_src": str(data_dir / f"train.{SRC}"), "path_tgt": str(data_dir / f"train.{TGT}")},
                 "valid": {"path_src": str(data_dir / f"val.{SRC}"), "path_tgt": str(data_dir / f"val.{TGT}")}},
        "save_model": str(run_dir / "model"), "train_steps": args.steps, "report_every": args.log_every,
        "seed": 1234})
    path = Path(args.work).resolve() / "peer_config.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return path


def run_measured(cmd: list[str], log: Path) -> dict:
    """Run `cmd` with THREADS threads, its output to `log`; its wall clock and peak RSS (wait4's ru_maxrss)."""
    with open(log, "w", encoding="utf-8") as f:
        t0 = time.time()
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=_peer.peer_env(THREADS), cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.time() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
        raise SystemExit(f"{cmd[0]} failed (exit {proc.returncode}); end of {log}:\n{tail}")
    return {"peak_rss_gib": round(usage.ru_maxrss / 2**20, 3), "wall_s": round(wall, 1)}


def run_peer(args: argparse.Namespace, config: Path, run_dir: Path, rnd: int, stamp: str) -> dict:
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    log = Path(args.work).resolve() / f"peer_round{rnd}.log"
    measured = run_measured([str(Path(args.peer_dir) / "venv" / "bin" / "onmt_train"), "-config", str(config)], log)
    raw = _peer.save_step_lines(log, Path(args.out).parent / f"opennmt_transformer_{stamp}_round{rnd}.log") \
        if args.out else log
    return {"round": rnd, **window_rates(onmt_marks(log), args.warmup), **measured, "raw_log": str(raw)}


def run_ours(args: argparse.Namespace, rnd: int) -> dict:
    work_dir = Path(args.work).resolve() / "ours"
    for f in ("last.pt", "best.pt", "averaged.pt", "metrics.jsonl"):  # a fresh run; the prepared data stays cached
        (work_dir / f).unlink(missing_ok=True)
    shutil.rmtree(work_dir / "best_loss", ignore_errors=True)
    cmd = [sys.executable, str(ROOT / "bench" / "train_logged.py"), str(write_our_config(args))]
    log = Path(args.work).resolve() / f"ours_round{rnd}.log"
    measured = run_measured(cmd, log)
    rates = window_rates(our_marks(work_dir / "metrics.jsonl", 64), args.warmup)
    return {"round": rnd, **rates, **measured, "precision": trained_precision(log)}


def summary(runs: list[dict]) -> dict:
    """Median over rounds of each rate, the largest peak RSS, and the rounds themselves."""
    return {**{k: round(statistics.median(r[k] for r in runs), 4) for k in METRICS},
            "peak_rss_gib": max(r["peak_rss_gib"] for r in runs),
            "tokens_per_sentence_window": round(statistics.median(
                r["src_plus_tgt_tokens_per_s_window"] / r["sent_per_s_window"] for r in runs), 2),
            "rounds": runs}


def versions(peer_dir: Path) -> dict:
    import torch
    freeze = Path(peer_dir) / "results" / "pip_freeze.txt"
    peer = [x for x in freeze.read_text().splitlines() if x.lower().startswith(("torch==", "opennmt-py=="))] \
        if freeze.is_file() else []
    return {"ours_torch": torch.__version__, "peer": peer}


def main() -> None:
    global THREADS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--threads", type=int, default=THREADS, help="torch threads of each side")
    ap.add_argument("--rounds", type=int, default=3, help="peer, ours, peer, ours, ... (peer first in each round)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "auto"],
                    help="ours (the peer trains in fp32, its only CPU precision); auto: what `train` would choose here")
    ap.add_argument("--warmup", type=int, default=50, help="steps before the timed window, each run")
    ap.add_argument("--log-every", type=int, default=25, help="log interval of both sides (steps)")
    ap.add_argument("--peer-dir", default=str(_peer.DEFAULT_PEER_DIR))
    ap.add_argument("--corpus", default=str(ROOT / "data" / "multi30k" / "corpus.yaml"))
    ap.add_argument("--work", default=str(ROOT / "runs" / "bench_transformer"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "transformer_vs_peer.jsonl"),
                    help="append the JSON line here ('' : print only); the peer's step lines go beside it")
    args = ap.parse_args()
    THREADS = args.threads
    if args.steps < args.warmup + 2 * args.log_every:
        ap.error(f"--steps must leave at least two log intervals after --warmup ({args.warmup + 2 * args.log_every})")
    onmt_train = Path(args.peer_dir) / "venv" / "bin" / "onmt_train"
    if not onmt_train.is_file():
        ap.error(f"no {onmt_train}: run `PEER_DIR={args.peer_dir} bash ../shared/peers/opennmt.sh setup` first")
    if not Path(args.corpus).is_file():
        ap.error(f"no corpus {args.corpus}: `interlingua data multi30k` (or get_multi30k) writes it")

    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    data_info = write_peer_data(args, work / "peer_data")
    peer_run_dir = work / "peer_run"
    peer_config = write_peer_config(args, work / "peer_data", peer_run_dir)
    stamp = time.strftime("%Y-%m-%d_%H%M")
    peer, ours = [], []
    for rnd in range(1, args.rounds + 1):
        peer.append(run_peer(args, peer_config, peer_run_dir, rnd, stamp))
        print(f"round {rnd} peer: {peer[-1]['steps_per_s_window']} steps/s", flush=True)
        ours.append(run_ours(args, rnd))
        print(f"round {rnd} ours: {ours[-1]['steps_per_s_window']} steps/s", flush=True)
    p, o = summary(peer), summary(ours)
    ratio = {k: round(o[k] / p[k], 3) for k in METRICS}
    ratio["peak_rss"] = round(o["peak_rss_gib"] / p["peak_rss_gib"], 3)
    ratio["steps_per_s_window_each_round"] = [round(a["steps_per_s_window"] / b["steps_per_s_window"], 3)
                                              for a, b in zip(ours, peer)]
    append_result(args.out or None, {
        "system": "interlingua / opennmt-py", "config": "transformer d128 ff512 h4 enc5 dec2, en->de, batch 64",
        "precision": {"ours": args.precision, "ours_each_round": [r["precision"] for r in ours], "peer": "fp32"},
        "steps": args.steps, "rounds": args.rounds, "warmup": args.warmup, "log_every": args.log_every,
        "threads": THREADS,
        "tokens": "src subwords + tgt subwords + EOS, no padding (both sides' own counts; the same sequences)",
        "ours_config": {"recipe": str(RECIPE.relative_to(ROOT)), "overrides": our_overrides(args)[2:]},
        "peer_config": str(PEER_CONFIG.relative_to(ROOT)), "data": data_info, "versions": versions(Path(args.peer_dir)),
        "ours": o, "peer": p, "ratio_ours_over_peer": ratio})


if __name__ == "__main__":
    main()
