"""Where one of our checkpoints' translation spends its time: torch.profiler over `Model.translate`.

Run: python bench/profile_decode.py --model runs/bench_transformer/ours/last.pt [--src en --tgt de]
     [--sentences 256] [--beams 1,5] [--precision fp32|bf16|int8] [--threads 2] [--batch-size 64] [--top 15]
     [--out bench/results/profile_decode.jsonl]

For each beam: one unprofiled warm-up pass, then one pass under torch.profiler over the first --sentences
sentences of test_2016_flickr (raw text in, text out, as `bench/translate_speed.py` times it). One JSON line
per beam: the pass's seconds with and without the profiler, the share of the time inside operators (the
rest is Python: the search loop, tokenisation, the modules' own code), and the --top operators by self CPU
time with their calls and microseconds per call. This says what a decoder step pays for (products, the
output layer, cache copies, top-k, dispatch) before anything is changed to make it faster.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from _decoding import decoding_parser  # noqa: E402
from _results import append_result  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from interlingua.data.corpus import read_lines  # noqa: E402
from interlingua.inference.api import load  # noqa: E402


def main() -> None:
    ap = decoding_parser(__doc__)
    ap.add_argument("--sentences", type=int, default=256)
    ap.add_argument("--beams", default="1,5")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--beam-stop", choices=("all", "top"), default="all")
    ap.add_argument("--precision", choices=("fp32", "bf16", "int8"), default="fp32")
    ap.add_argument("--top", type=int, default=15, help="operators listed, by self CPU time")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    src = read_lines(Path(args.data) / f"test_2016_flickr.{args.src}.gz")[:args.sentences]
    model = load(args.model, precision=args.precision)

    def run(beam: int) -> float:
        t0 = time.perf_counter()
        model.translate(src, args.src, args.tgt, beam=beam, batch_size=args.batch_size, beam_stop=args.beam_stop)
        return time.perf_counter() - t0

    for beam in [int(b) for b in args.beams.split(",")]:
        plain = min(run(beam), run(beam))
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            profiled = run(beam)
        events = [e for e in prof.key_averages() if e.key not in ("ProfilerStep*",)]
        self_total = sum(e.self_cpu_time_total for e in events)
        top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:args.top]
        append_result(args.out, {
            "kind": "profile", "model": args.model, "direction": f"{args.src}-{args.tgt}", "beam": beam,
            "precision": args.precision, "beam_stop": args.beam_stop, "sentences": len(src),
            "batch_size": args.batch_size, "threads": args.threads, "output_kernel": model.output_kernel,
            "seconds": round(plain, 4), "seconds_profiled": round(profiled, 4),
            "operator_share": round(self_total / 1e6 / profiled, 3),
            "top": [{"op": e.key, "calls": e.count, "self_ms": round(e.self_cpu_time_total / 1e3, 1),
                     "us_per_call": round(e.self_cpu_time_total / max(e.count, 1), 1)} for e in top]})


if __name__ == "__main__":
    main()
