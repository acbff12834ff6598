"""Translation speed and quality of our checkpoints and OpenNMT-py's, timed interleaved, the same way.

Run: python bench/translate_vs_peer.py --ours bridge=runs/.../attention/last.pt --ours none=runs/.../none/last.pt
     [--peer-ckpt PATH (default: the peer's last saved checkpoint of its budget run)] [--rounds 3]
     [--beams 1,5] [--beam-stops all,top] [--precisions fp32,bf16,int8] [--peer-int8] [--threads 2] [--max-len 100]
     [--shortlist NAME=FILE (built by `interlingua shortlist`; repeat)] [--workers 1,2]
     [--out bench/results/translate_vs_peer.jsonl]

Every timed pass is a fresh process on both sides, started one after another in rounds
(greedy first, then beam 5; the order of the systems rotates from round to round), so a
machine whose speed drifts slows every system alike. Both sides are timed by their own
in-process clock from the first sentence in to the last one out, model loading excluded:
OpenNMT-py's `onmt_translate -report_time` ("Total translation time", 0.1 s resolution; its
input is the sentencepiece pieces its `prep` stage wrote) and `bench/translate_speed.py`
(raw text in, so our tokenisation and detokenisation are inside our time); each process's
wall clock, loading included, is recorded too. Both decode with batches of 64 sentences,
`--threads` threads and the same output cap (`--max-len` subwords; OpenNMT-py's `-max_length`
default is 100). Both outputs are scored by the same function (lowercased sacreBLEU 13a and
chrF, the peer's pieces decoded with its own sentencepiece model first).

Lines appended to --out: one per timed pass ("pass"), then one per system and beam
("summary": best and median seconds and sentences/s, their ratios to the peer, BLEU / chrF,
output lengths, the checkpoint and its step). A system whose pass would take over 10x its fp32
counterpart's (`opennmt-py@int8` -> `opennmt-py`, `NAME[/top]@PRECISION` -> `NAME[/top]`) is
stopped at that time, and one our library refuses (int8 where no int8 kernel is faster than fp32 on
this CPU) ends at once: either gets a "skipped" line saying why and is not run again
(`translate_speed.SKIP_FACTOR`); the counterparts run first in the first round. `--shortlist NAME=FILE` times
our system NAME a second time with that lexical shortlist (`Model.use_shortlist`), named NAME+shortlist. `--workers
1,2` times each of our systems with each number of decoding streams (`Model.translate(workers=)`: threads that
share the same `--threads` cores), named .../workersN for N > 1.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _peer  # noqa: E402
from _results import append_result  # noqa: E402
from translate_speed import SKIPPABLE, output_stats, skip_after, skip_reason, timed_pass  # noqa: E402

from interlingua.data.corpus import read_lines  # noqa: E402
from interlingua.training.validation import corpus_scores  # noqa: E402

PEER = "opennmt-py"
PEER_INT8 = "opennmt-py@int8"


def main() -> None:
    from interlingua import tune_allocator
    tune_allocator()  # as the command line does (INTERLINGUA_ALLOCATOR=default: malloc left as it is)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ours", action="append", required=True, metavar="NAME=CKPT",
                    help="one of our checkpoints (repeat)")
    ap.add_argument("--peer-dir", default=str(_peer.DEFAULT_PEER_DIR))
    ap.add_argument("--peer-ckpt", default=None, help="default: the last model_step_*.pt of the peer's budget run")
    ap.add_argument("--src", default="en")
    ap.add_argument("--tgt", default="de")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--beams", default="1,5")
    ap.add_argument("--beam-stops", default="all",
                    help="our beam search's stop rules to time (comma-separated: all, top); each of our systems "
                         "with rule `top` is named NAME/top (OpenNMT-py always stops a sentence at its top beam)")
    ap.add_argument("--precisions", default="fp32",
                    help="comma-separated precisions of ours (interlingua.load's); a system other than fp32 is "
                         "named NAME@PRECISION")
    ap.add_argument("--peer-int8", action="store_true",
                    help="also time the peer with its -int8 option (PyTorch dynamic int8), named opennmt-py@int8")
    ap.add_argument("--shortlist", action="append", default=[], metavar="NAME=FILE",
                    help="also time our system NAME with this lexical shortlist, as NAME+shortlist (repeat)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workers", default="1",
                    help="our decoding streams, comma-separated (each system timed with each; on --threads cores)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--max-len", type=int, default=100)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    ap.add_argument("--work", default=str(ROOT / "runs" / "bench_translate_vs_peer"), help="outputs of every pass")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "translate_vs_peer.jsonl"))
    args = ap.parse_args()

    peer_dir = Path(args.peer_dir)
    peer_ckpt = Path(args.peer_ckpt) if args.peer_ckpt else _peer.last_checkpoint(peer_dir)
    peer_src = peer_dir / "data" / f"test_2016_flickr.sp.{args.src}"
    peer_spm = peer_dir / "spm" / f"bpe8k.{args.tgt}.model"
    for f in (peer_src, peer_spm):
        if not f.is_file():
            raise SystemExit(f"{f} is missing: run `PEER_DIR={peer_dir} bash {_peer.PEER_SCRIPT} setup prep` first")
    ours = {name: (ckpt, None) for name, ckpt in (x.split("=", 1) for x in args.ours)}
    for name, shortlist in (x.split("=", 1) for x in args.shortlist):
        if name not in ours:
            raise SystemExit(f"--shortlist {name}=...: no --ours {name}=CKPT")
        ours[f"{name}+shortlist"] = (ours[name][0], shortlist)
    stops = args.beam_stops.split(",")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    ref = read_lines(Path(args.data) / f"test_2016_flickr.{args.tgt}.gz")
    n = len(ref)

    for beam in [int(b) for b in args.beams.split(",")]:
        # (system name, checkpoint, stop rule): greedy search has no stop rule to vary
        runs = {(name if stop == "all" else f"{name}/{stop}") + ("" if workers == 1 else f"/workers{workers}")
                + ("" if prec == "fp32" else f"@{prec}"): (ckpt, stop, prec, shortlist, workers)
                for prec in args.precisions.split(",") for stop in (stops if beam > 1 else ["all"])
                for workers in [int(w) for w in args.workers.split(",")] for name, (ckpt, shortlist) in ours.items()}
        systems = [PEER, *([PEER_INT8] if args.peer_int8 else []), *runs]
        passes: dict[str, list[dict]] = {s: [] for s in systems}
        # the fp32 system each other one is timed against for skipping (NAME[/top]@PRECISION -> NAME[/top])
        counterpart = {s: s.split("@")[0] if "@" in s and s.split("@")[0] in systems else None for s in systems}
        skipped: set[str] = set()
        for r in range(args.rounds):
            order = systems[r % len(systems):] + systems[:r % len(systems)]
            if r == 0:  # the fp32 counterparts first: their time bounds the others' (skip_after)
                order.sort(key=lambda s: counterpart[s] is not None)
            for system in [s for s in order if s not in skipped]:
                timeout = skip_after(passes.get(counterpart[system] or ""))
                try:
                    if system in (PEER, PEER_INT8):
                        hyps = work / f"{system.replace('@', '_')}.beam{beam}.sp.{args.tgt}"
                        res = _peer.translate(peer_dir, peer_ckpt, peer_src, hyps, beam=beam, threads=args.threads,
                                              batch_size=args.batch_size, max_length=args.max_len,
                                              int8=system == PEER_INT8, timeout=timeout)
                        res.update(step=_peer.checkpoint_step(peer_ckpt), hyps=hyps)
                    else:
                        ckpt, stop, prec, shortlist, workers = runs[system]
                        res = timed_pass(ckpt, src=args.src, tgt=args.tgt, beam=beam, stop=stop,
                                         threads=args.threads, batch_size=args.batch_size, max_len=args.max_len,
                                         data=args.data, hyps_dir=work / system.replace("/", "_").replace("@", "_"),
                                         precision=prec, shortlist=shortlist, timeout=timeout, workers=workers)
                except SKIPPABLE as err:
                    skipped.add(system)
                    append_result(args.out, {"kind": "skipped", "system": system, "beam": beam, "round": r + 1,
                                             "why": skip_reason(err), "fp32_counterpart": counterpart[system],
                                             "threads": args.threads})
                    continue
                passes[system].append(res)
                append_result(args.out, {"kind": "pass", "system": system, "beam": beam, "round": r + 1,
                                         "position": order.index(system) + 1, "seconds": res["seconds"],
                                         "wall_incl_load_s": res["wall_incl_load_s"], "threads": args.threads})
        peer_best = min(p["seconds"] for p in passes[PEER])
        peer_median = statistics.median(p["seconds"] for p in passes[PEER])
        int8_median = (statistics.median(p["seconds"] for p in passes[PEER_INT8])
                       if PEER_INT8 in passes and PEER_INT8 not in skipped else None)
        import sentencepiece as spm
        yardstick = spm.SentencePieceProcessor(model_file=str(peer_spm))  # target tokens: the peer's pieces
        for system in [s for s in systems if s not in skipped]:
            ps = passes[system]
            lines = ps[-1]["hyps"].read_text(encoding="utf-8").splitlines()
            is_peer = system in (PEER, PEER_INT8)
            hyps = _peer.decode_pieces(peer_spm, lines) if is_peer else lines
            tokens = sum(len(p) for p in yardstick.encode(hyps, out_type=str))
            bleu, chrf = corpus_scores(hyps, ref)
            best, median = min(p["seconds"] for p in ps), statistics.median(p["seconds"] for p in ps)
            append_result(args.out, {
                "kind": "summary", "system": system, "beam": beam, "direction": f"{args.src}-{args.tgt}",
                "checkpoint": str(peer_ckpt if is_peer else runs[system][0]),
                "beam_stop": "top" if is_peer else runs[system][1],
                "precision": ("int8" if system == PEER_INT8 else "fp32") if is_peer else runs[system][2],
                "shortlist": None if is_peer else runs[system][3], "workers": 1 if is_peer else runs[system][4],
                "step": ps[-1]["step"], "target_tokens": tokens, "tok_per_s_median": round(tokens / median, 1),
                "sentences": n, "rounds": args.rounds, "seconds": [p["seconds"] for p in ps],
                "wall_incl_load_s": [p["wall_incl_load_s"] for p in ps],
                "sent_per_s_best": round(n / best, 1), "sent_per_s_median": round(n / median, 1),
                "vs_peer_best": round(peer_best / best, 3), "vs_peer_median": round(peer_median / median, 3),
                "vs_peer_int8_median": None if int8_median is None else round(int8_median / median, 3),
                "bleu_lc": round(bleu, 2), "chrf_lc": round(chrf, 2), **output_stats(hyps),
                "threads": args.threads, "batch_size": args.batch_size, "max_len": args.max_len})


if __name__ == "__main__":
    main()
