"""`--engine ctranslate2` against CTranslate2 run directly on the same export (the call its README gives:
sentencepiece, `translate_batch`, decode), test_2016_flickr, greedy and beam 5, passes interleaved,
medians; also the native engine. Appends one line per search to bench/results/engine_vs_ct2.jsonl.

    python bench/engine_vs_ct2.py --model runs/multi30k/cpu/zero_resource/zs_baseline_none/best.pt \\
        --src en --tgt de --threads 2
"""
from __future__ import annotations

import gzip
import json
import statistics
import time
from pathlib import Path

import torch
from _decoding import decoding_parser
from _results import append_result

import interlingua
from interlingua.inference.ctranslate2_engine import export_folder_for

RESULTS = Path(__file__).parent / "results" / "engine_vs_ct2.jsonl"


def main() -> None:
    ap = decoding_parser(__doc__)
    ap.add_argument("--data", default="data/multi30k", help="Multi30k as `interlingua data multi30k` writes it")
    ap.add_argument("--sentences", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--beams", default="1,5")
    ap.add_argument("--results", default=str(RESULTS))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import ctranslate2
    import sentencepiece as spm

    with gzip.open(Path(args.data) / f"test_2016_flickr.{args.src}.gz", "rt", encoding="utf-8") as f:
        texts = [line.rstrip("\n") for line in f][:args.sentences]
    engine = interlingua.load(args.model, "cpu", engine="ctranslate2")
    native = interlingua.load(args.model, "cpu")
    folder = export_folder_for(Path(args.model))  # the export the engine cached
    meta = json.loads((folder / "interlingua.json").read_text())
    translator = ctranslate2.Translator(str(folder), device="cpu", inter_threads=1, intra_threads=args.threads)
    sp = spm.SentencePieceProcessor(model_file=str(folder / meta["tokenizer"]))
    tag = meta["language_tags"][args.tgt]
    max_len = meta["preprocess"]["max_len"]

    def direct(beam: int) -> list[str]:
        source = [sp.encode(" ".join(t.split()), out_type=str)[:max_len] for t in texts]
        results = translator.translate_batch(source, target_prefix=[[tag]] * len(source), beam_size=beam,
                                             min_decoding_length=0, max_decoding_length=4 * max_len,
                                             max_batch_size=64)
        return [sp.decode([i for i in map(sp.piece_to_id, r.hypotheses[0]) if i > 3]) for r in results]

    for beam in map(int, args.beams.split(",")):
        systems = {"engine_ctranslate2": lambda b=beam: engine.translate(texts, args.src, args.tgt, beam=b),
                   "ctranslate2_direct": lambda b=beam: direct(b),
                   "native": lambda b=beam: native.translate(texts, args.src, args.tgt, beam=b)}
        times: dict[str, list[float]] = {name: [] for name in systems}
        for warm in systems.values():
            warm()
        for _ in range(args.rounds):
            for name, run in systems.items():
                t0 = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - t0)
        medians = {name: statistics.median(v) for name, v in times.items()}
        rate = {name: round(len(texts) / m, 1) for name, m in medians.items()}
        append_result(args.results, {
            "bench": "engine_vs_ct2", "model": args.model, "direction": f"{args.src}-{args.tgt}", "beam": beam,
            "sentences": len(texts), "threads": args.threads, "rounds": args.rounds, "sentences_per_s": rate,
            "native_output_kernel": native.output_kernel,
            "engine_vs_direct": round(medians["ctranslate2_direct"] / medians["engine_ctranslate2"], 3),
            "engine_vs_native": round(medians["native"] / medians["engine_ctranslate2"], 3)})


if __name__ == "__main__":
    main()
