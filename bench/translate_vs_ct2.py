"""Transformer translation speed: ours against CTranslate2 (and OpenNMT-py) on the peer's Transformer of the same size.

Run (after bench/transformer_vs_peer.py, which trains both Transformers on the same subwords):
    python bench/translate_vs_ct2.py [--ours runs/bench_transformer/ours/last.pt]
        [--peer-ckpt runs/bench_transformer/peer_run/model_step_N.pt] [--rounds 3] [--beams 1,5]
        [--beam-stops all,top] [--threads 2] [--out bench/results/translate_vs_ct2.jsonl]

The peer's OpenNMT-py checkpoint is converted with CTranslate2's own converter (fp32, no
quantisation) in the peer's virtualenv. Three systems translate test_2016_flickr en->de, 1,000
sentences: CTranslate2 (`Translator.translate_batch`, 1 translator x `--threads` intra-op
threads, batches of 64, max_decoding_length 100, its default beam rule: a sentence stops when
its best beam finishes), OpenNMT-py (`onmt_translate`), and ours (`bench/translate_speed.py`,
raw text in, `--max-len 100`, each `--beam-stops` rule; with `--own-limit` also with the
library's default per-sentence limit, twice the source length + 10, which the peers lack). \
The peer's input is our test sentences
cut into our joint vocabulary's pieces, exactly what it was trained on. Every timed pass is a
fresh process, each timed by its own in-process clock from first sentence in to last out
(model loading excluded); the system order rotates from round to round. All outputs are scored
by one function (lowercased sacreBLEU 13a, chrF), the peers' pieces decoded with our joint
sentencepiece model. Lines appended to --out: one per pass, one summary per system and beam
(sentences/s best and median, ratio to CTranslate2 and to OpenNMT-py, BLEU, output lengths).

The two models are trained separately (same sizes, data and steps), so their outputs differ;
`mean_words` and `outputs_ge_40_words` in each summary show how comparable the work was.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import _peer  # noqa: E402
from _results import append_result  # noqa: E402
from translate_speed import output_stats, timed_pass  # noqa: E402

from interlingua.data.corpus import read_lines  # noqa: E402
from interlingua.training.validation import corpus_scores  # noqa: E402

CT2_PASS = """
import sys, time, ctranslate2
model, src, out, beam, threads, batch, max_len = sys.argv[1:8]
tr = ctranslate2.Translator(model, device="cpu", inter_threads=1, intra_threads=int(threads))
lines = [l.split() for l in open(src, encoding="utf-8")]
t0 = time.perf_counter()
res = tr.translate_batch(lines, max_batch_size=int(batch), beam_size=int(beam), max_decoding_length=int(max_len))
seconds = time.perf_counter() - t0
open(out, "w", encoding="utf-8").write("".join(" ".join(r.hypotheses[0]) + "\\n" for r in res))
print(f"SECONDS {seconds}")
"""


def write_peer_input(ours_ckpt: str, src_lines: list[str], dest: Path) -> Path:
    """Our test sources as pieces of our joint vocabulary (normalised and cut as in training)."""
    from interlingua.inference.api import load
    model = load(ours_ckpt, "cpu")
    vocab = model.vocabs["en"]
    from interlingua.data.inputs import tokenize_inputs
    seqs = tokenize_inputs(src_lines, vocab, model.preprocess)
    dest.write_text("".join(" ".join(vocab.id_to_piece(int(i)) for i in s) + "\n" for s in seqs), encoding="utf-8")
    return dest


# OpenNMT-py 3.5.1 records its default self_attn_type "scaled-dot-flash", which CTranslate2's converter
# refuses; on the CPU it is the same scaled dot-product attention with the same weights (3.5.1 uses
# torch's fused kernel only off the CPU), so a copy of the checkpoint says "scaled-dot".
RELABEL = """
import sys, torch
ck = torch.load(sys.argv[1], map_location="cpu", weights_only=False)
ck["opt"].self_attn_type = "scaled-dot"
torch.save(ck, sys.argv[2])
"""


def convert(peer_dir: Path, ckpt: Path, out: Path) -> Path:
    relabelled = out.parent / "peer_for_ct2.pt"
    done = subprocess.run([str(peer_dir / "venv" / "bin" / "python"), "-c", RELABEL, str(ckpt), str(relabelled)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"could not relabel the checkpoint's attention type:\n{done.stderr[-2000:]}")
    cmd = [str(peer_dir / "venv" / "bin" / "ct2-opennmt-py-converter"), "--model_path", str(relabelled),
           "--output_dir", str(out), "--force", "--unsafe_deserialization"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"CTranslate2 conversion failed:\n{(done.stdout + done.stderr)[-2000:]}")
    return out


def ct2_pass(peer_dir: Path, model: Path, src: Path, out: Path, beam: int, args: argparse.Namespace) -> dict:
    cmd = [str(peer_dir / "venv" / "bin" / "python"), "-c", CT2_PASS, str(model), str(src), str(out), str(beam),
           str(args.threads), str(args.batch_size), str(args.max_len)]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=_peer.peer_env(args.threads))
    wall = time.perf_counter() - t0
    found = [line for line in done.stdout.splitlines() if line.startswith("SECONDS ")]
    if done.returncode != 0 or not found:
        raise SystemExit(f"CTranslate2 pass failed:\n{done.stderr[-2000:]}")
    return {"seconds": round(float(found[-1].split()[1]), 3), "wall_incl_load_s": round(wall, 2), "hyps": out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ours", default=str(ROOT / "runs" / "bench_transformer" / "ours" / "last.pt"))
    ap.add_argument("--peer-ckpt", default=None,
                    help="default: the last model_step_*.pt of bench_transformer's peer run")
    ap.add_argument("--peer-dir", default=str(_peer.DEFAULT_PEER_DIR))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--beams", default="1,5")
    ap.add_argument("--beam-stops", default="all,top")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--max-len", type=int, default=100)
    ap.add_argument("--own-limit", action="store_true",
                    help="also time ours with its default per-sentence output limit (NAME/own-limit)")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    ap.add_argument("--work", default=str(ROOT / "runs" / "bench_translate_vs_ct2"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "translate_vs_ct2.jsonl"))
    args = ap.parse_args()
    peer_dir, work = Path(args.peer_dir), Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    peer_ckpt = Path(args.peer_ckpt) if args.peer_ckpt else max(
        (ROOT / "runs" / "bench_transformer" / "peer_run").glob("model_step_*.pt"), key=_peer.checkpoint_step)
    src_lines = read_lines(Path(args.data) / "test_2016_flickr.en.gz")
    ref = read_lines(Path(args.data) / "test_2016_flickr.de.gz")
    peer_src = write_peer_input(args.ours, src_lines, work / "test_2016_flickr.sp.en")
    ct2_model = convert(peer_dir, peer_ckpt, work / "ct2_model")
    spm_model = Path(args.ours).parent / "data" / "joint.model"

    for beam in [int(b) for b in args.beams.split(",")]:
        ours = [f"interlingua/{stop}" for stop in (args.beam_stops.split(",") if beam > 1 else ["all"])]
        systems = ["ctranslate2", "opennmt-py", *ours, *[f"{o}/own-limit" for o in ours if args.own_limit]]
        passes: dict[str, list[dict]] = {s: [] for s in systems}
        for r in range(args.rounds):
            order = systems[r % len(systems):] + systems[:r % len(systems)]
            for system in order:
                if system == "ctranslate2":
                    res = ct2_pass(peer_dir, ct2_model, peer_src, work / f"ct2.beam{beam}.sp.de", beam, args)
                elif system == "opennmt-py":
                    hyps = work / f"onmt.beam{beam}.sp.de"
                    res = _peer.translate(peer_dir, peer_ckpt, peer_src, hyps, beam=beam, threads=args.threads,
                                          batch_size=args.batch_size, max_length=args.max_len)
                    res["hyps"] = hyps
                else:
                    # NAME/own-limit: the library's own per-sentence output limit in place of --max-len
                    res = timed_pass(args.ours, src="en", tgt="de", beam=beam, stop=system.split("/")[1],
                                     threads=args.threads, batch_size=args.batch_size,
                                     max_len=None if system.endswith("/own-limit") else args.max_len, data=args.data,
                                     hyps_dir=work / system.replace("/", "_"))
                passes[system].append(res)
                append_result(args.out, {"kind": "pass", "system": system, "beam": beam, "round": r + 1,
                                         "seconds": res["seconds"], "wall_incl_load_s": res["wall_incl_load_s"],
                                         "threads": args.threads})
        medians = {s: statistics.median(p["seconds"] for p in ps) for s, ps in passes.items()}
        for system, ps in passes.items():
            lines = ps[-1]["hyps"].read_text(encoding="utf-8").splitlines()
            hyps = lines if system.startswith("interlingua") else _peer.decode_pieces(spm_model, lines)
            bleu, chrf = corpus_scores(hyps, ref)
            best = min(p["seconds"] for p in ps)
            append_result(args.out, {
                "kind": "summary", "system": system, "beam": beam, "direction": "en-de",
                "checkpoint": str(args.ours if system.startswith("interlingua") else peer_ckpt),
                "sentences": len(ref), "rounds": args.rounds, "seconds": [p["seconds"] for p in ps],
                "sent_per_s_best": round(len(ref) / best, 1), "sent_per_s_median": round(len(ref) / medians[system], 1),
                "vs_ct2_median": round(medians["ctranslate2"] / medians[system], 3),
                "vs_opennmt_median": round(medians["opennmt-py"] / medians[system], 3),
                "bleu_lc": round(bleu, 2), "chrf_lc": round(chrf, 2), **output_stats(hyps),
                "threads": args.threads, "batch_size": args.batch_size, "max_len": args.max_len})


if __name__ == "__main__":
    main()
