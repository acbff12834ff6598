"""Translation throughput and quality of one of our checkpoints on Multi30k test_2016_flickr.

Run: python bench/translate_speed.py --model runs/.../last.pt [--src en --tgt de] [--reps 3]
     [--beams 1,5] [--threads 2] [--max-len 100] [--hyps-dir DIR] [--out FILE]
For each beam: sentences/s of `Model.translate` over the 1,000 sentences (raw text in,
text out: tokenisation and detokenisation included, model loading excluded), every timed
pass's seconds, the best of --reps, and lowercased BLEU / chrF of the output. One JSON line
per beam is printed and appended to --out, with the precision and whether the output layer ran
oneDNN's packed fp32 product (`output_kernel`: `Model.output_kernel`;
INTERLINGUA_OUTPUT_KERNEL=default turns it off). `bench/translate_vs_peer.py` runs this script
once per timed pass, in a fresh process, beside the peer's own translation program. A precision
the library refuses here (int8 where no int8 kernel is faster than fp32 on this CPU) exits with
status 3 and the refusal on stderr.

The comparisons skip a system whose single pass would take over SKIP_FACTOR (10) times its fp32
counterpart's (`skip_after`: its pass is stopped at that time, loading included on both sides), or
that the library refuses, and say so in a "skipped" line; it is not run again.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from _decoding import decoding_parser  # noqa: E402
from _results import append_result  # noqa: E402

from interlingua.data.corpus import read_lines  # noqa: E402
from interlingua.errors import InterlinguaError  # noqa: E402
from interlingua.inference.api import load  # noqa: E402
from interlingua.training.validation import corpus_scores  # noqa: E402

SKIP_FACTOR = 10
"""A system whose pass would take over this many times its fp32 counterpart's is skipped."""
REFUSED = 3
"""This script's exit status where the library refuses the precision asked for."""


class PassSkipped(Exception):
    """A pass refused by the library, or stopped at SKIP_FACTOR times its fp32 counterpart's time: why."""


def skip_after(reference: list[dict] | None) -> float | None:
    """The seconds after which a pass is stopped: SKIP_FACTOR times the fastest pass of its fp32 counterpart so
    far (`reference`, wall clock with loading), None where that has not run."""
    return SKIP_FACTOR * min(p["wall_incl_load_s"] for p in reference) if reference else None


def skip_reason(err: Exception) -> str:
    """The "skipped" line's `why` for a refused pass (PassSkipped) or one stopped by its timeout."""
    if isinstance(err, subprocess.TimeoutExpired):
        return (f"one pass would take over {SKIP_FACTOR}x its fp32 counterpart's (loading included): stopped after "
                f"{float(err.timeout):.1f} s")
    return str(err)


SKIPPABLE = (PassSkipped, subprocess.TimeoutExpired)
"""What a comparison catches around a pass to skip the system (`skip_reason`)."""


def timed_pass(ckpt: str, *, src: str, tgt: str, beam: int, stop: str, threads: int, batch_size: int,
               max_len: int | None, data: str, hyps_dir: Path, precision: str = "fp32",
               shortlist: str | None = None, timeout: float | None = None, workers: int = 1) -> dict:
    """One timed pass of this script in a fresh process (what the peer comparisons time on our side):
    its in-process seconds for one rep, its wall clock with model loading, the checkpoint's step and
    the file its output went to. `max_len` None: the library's per-sentence output limit. PassSkipped
    where the library refuses `precision`; subprocess.TimeoutExpired past `timeout` seconds."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--model", ckpt, "--src", src, "--tgt", tgt,
           "--beams", str(beam), "--beam-stop", stop, "--reps", "1", "--threads", str(threads),
           "--batch-size", str(batch_size), *([] if max_len is None else ["--max-len", str(max_len)]),
           "--data", data, "--hyps-dir", str(hyps_dir), "--precision", precision,
           *([] if shortlist is None else ["--shortlist", shortlist]), "--workers", str(workers)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    if proc.returncode == REFUSED:
        raise PassSkipped(f"refused: {proc.stderr.strip().splitlines()[-1]}")
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"translate_speed.py failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    rec = json.loads(lines[-1])
    return {"seconds": rec["seconds"][0], "wall_incl_load_s": round(wall, 2), "step": rec["step"],
            "output_kernel": rec.get("output_kernel"),
            "hyps": Path(hyps_dir) / f"{Path(ckpt).parent.name}.beam{beam}.{tgt}"}


def output_stats(hyps: list[str], long_words: int = 40) -> dict:
    """Length of the outputs in words; many outputs of `long_words`+ words are the sign of repetition loops."""
    words = [len(h.split()) for h in hyps]
    return {"mean_words": round(sum(words) / max(len(words), 1), 2), "longest_words": max(words, default=0),
            f"outputs_ge_{long_words}_words": sum(w >= long_words for w in words)}


def main() -> None:
    ap = decoding_parser(__doc__)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--beams", default="1,5")
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--max-len", type=int, default=None,
                    help="output length cap in subwords (default: the model's, 2 x longest source in the batch + 10)")
    ap.add_argument("--beam-stop", choices=("all", "top"), default="all", help="Model.translate's beam_stop")
    ap.add_argument("--precision", choices=("fp32", "bf16", "int8", "fp16", "auto"), default="fp32",
                    help="interlingua.load's precision")
    ap.add_argument("--shortlist", default=None, help="a lexical shortlist file (Model.use_shortlist)")
    ap.add_argument("--workers", type=int, default=1,
                    help="Model.translate's workers: batches decoded at once, each with a share of --threads")
    ap.add_argument("--hyps-dir", default=None, help="write each beam's output here (<name>.beam<N>.<tgt>)")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    src = read_lines(Path(args.data) / f"test_2016_flickr.{args.src}.gz")
    ref = read_lines(Path(args.data) / f"test_2016_flickr.{args.tgt}.gz")
    try:
        tr = load(args.model, precision=args.precision)
    except InterlinguaError as err:  # e.g. int8 where no int8 kernel pays on this CPU
        print(err, file=sys.stderr)
        sys.exit(REFUSED)
    if args.shortlist:
        tr.use_shortlist(args.shortlist)
    step = tr.step
    for beam in [int(b) for b in args.beams.split(",")]:
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            hyps = tr.translate(src, args.src, args.tgt, beam=beam, batch_size=args.batch_size,
                                max_len=args.max_len, beam_stop=args.beam_stop, workers=args.workers)
            times.append(time.perf_counter() - t0)
        if args.hyps_dir:
            folder = Path(args.hyps_dir)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{Path(args.model).parent.name}.beam{beam}.{args.tgt}").write_text(
                "".join(h + "\n" for h in hyps), encoding="utf-8")
        bleu, chrf = corpus_scores(hyps, ref)
        res = {"system": "interlingua", "model": args.model, "step": step, "direction": f"{args.src}-{args.tgt}",
               "beam": beam, "beam_stop": args.beam_stop, "workers": args.workers, "precision": tr.runtime.precision,
               "output_kernel": tr.output_kernel, "shortlist": args.shortlist,
               "threads": args.threads, "batch_size": args.batch_size, "max_len": args.max_len,
               "sentences": len(src), "sent_per_s_best": round(len(src) / min(times), 1),
               "seconds": [round(t, 3) for t in times], "bleu_lc": round(bleu, 2), "chrf_lc": round(chrf, 2),
               **output_stats(hyps)}
        append_result(args.out, res)


if __name__ == "__main__":
    main()
