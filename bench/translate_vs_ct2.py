"""Transformer translation speed: ours (fp32 / bf16 / int8, with and without a shortlist) against OpenNMT-py
and CTranslate2 (fp32 and int8) on the peer's Transformer of the same size.

Run (after bench/transformer_vs_peer.py, which trains both Transformers on the same subwords):
    python bench/translate_vs_ct2.py [--ours runs/bench_transformer/ours/last.pt]
        [--peer-ckpt runs/bench_transformer/peer_run/model_step_N.pt] [--rounds 3] [--beams 1,5]
        [--systems ctranslate2,ctranslate2/int8,opennmt-py,opennmt-py/int8,interlingua/fp32/all,...]
        [--shortlist FILE] [--threads 2] [--out bench/results/translate_vs_ct2.jsonl]

Systems (`--systems`, comma-separated):
- `ctranslate2[/int8]`: the peer's OpenNMT-py checkpoint converted with CTranslate2's own converter
  (fp32), run with compute_type float32 or int8 (`Translator.translate_batch`, 1 translator x
  `--threads` intra-op threads, batches of 64, max_decoding_length `--max-len`, its beam rule: a
  sentence stops when its best beam finishes);
- `opennmt-py[/int8]`: `onmt_translate` (`-int8`: PyTorch's dynamic int8 quantization);
- `interlingua/PRECISION/STOP[/own-limit][/shortlist]`: ours (`bench/translate_speed.py`, raw text
  in), PRECISION fp32, bf16 or int8, STOP `all` or `top` (beam rule; greedy ignores it); `own-limit`:
  the library's default per-sentence output limit (2 x source + 10) instead of `--max-len`;
  `shortlist`: with the lexical shortlist `--shortlist` (built by `interlingua shortlist` when absent);
  `workersN` (last): N batches decoded at once in threads, each with a share of `--threads` (`Model.translate`'s
  `workers`);
- `ours-ct2[/int8]`: our checkpoint exported with `interlingua export ctranslate2`, run by CTranslate2
  as above (the same model as ours, in CTranslate2's engine).
The peer's input is our test sentences (test_2016_flickr en->de, 1,000) cut into our joint
vocabulary's pieces, exactly what it was trained on. Every timed pass is a fresh process, each
timed by its own in-process clock from first sentence in to last out (model loading excluded);
the system order rotates from round to round. All outputs are scored by one function (lowercased
sacreBLEU 13a, chrF), the peers' pieces decoded with our joint sentencepiece model; target
tokens are the outputs' subwords in that vocabulary. Lines appended to --out: one per pass, one
summary per system and beam (sentences/s and target tokens/s, best and median, ratios to
CTranslate2 fp32 and int8 and to OpenNMT-py, BLEU, output lengths).

The two models are trained separately (same sizes, data and steps), so their outputs differ;
`mean_words` and `outputs_ge_40_words` in each summary show how comparable the work was.

A system whose pass would take over 10x its fp32 counterpart's (`ctranslate2/int8` -> `ctranslate2`;
ours: the same system in fp32, else with beam rule `all`, else with fewer options: `fp32_counterpart`)
is stopped at that time, and one our library refuses (int8 where no int8 kernel is
faster than fp32 on this CPU) ends at once: either gets a "skipped" line saying why and is not run
again (`translate_speed.SKIP_FACTOR`); the counterparts run first in the first round.
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
from translate_speed import SKIPPABLE, output_stats, skip_after, skip_reason, timed_pass  # noqa: E402

from interlingua.data.corpus import read_lines  # noqa: E402
from interlingua.training.validation import corpus_scores  # noqa: E402

CT2_PASS = """
import sys, time, ctranslate2
model, src, out, beam, threads, batch, max_len, compute_type, prefix = sys.argv[1:10]
tr = ctranslate2.Translator(model, device="cpu", inter_threads=1, intra_threads=int(threads), compute_type=compute_type)
lines = [l.split() for l in open(src, encoding="utf-8")]
target_prefix = [[prefix]] * len(lines) if prefix else None
t0 = time.perf_counter()
res = tr.translate_batch(lines, max_batch_size=int(batch), beam_size=int(beam), max_decoding_length=int(max_len),
                         target_prefix=target_prefix, min_decoding_length=0)
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


def ct2_pass(peer_dir: Path, model: Path, src: Path, out: Path, beam: int, args: argparse.Namespace,
             compute_type: str = "float32", prefix: str = "", timeout: float | None = None) -> dict:
    cmd = [str(peer_dir / "venv" / "bin" / "python"), "-c", CT2_PASS, str(model), str(src), str(out), str(beam),
           str(args.threads), str(args.batch_size), str(args.max_len), compute_type, prefix]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=_peer.peer_env(args.threads), timeout=timeout)
    wall = time.perf_counter() - t0
    found = [line for line in done.stdout.splitlines() if line.startswith("SECONDS ")]
    if done.returncode != 0 or not found:
        raise SystemExit(f"CTranslate2 pass failed:\n{done.stderr[-2000:]}")
    return {"seconds": round(float(found[-1].split()[1]), 3), "wall_incl_load_s": round(wall, 2), "hyps": out}


def export_ours(ours: str, out: Path) -> tuple[Path, str]:
    """Our checkpoint as a CTranslate2 model (`interlingua export ctranslate2`) and the target prefix its
    translate_batch call needs (the <2de> tag where the model starts its decoder with it)."""
    from interlingua.data.vocab import language_tag
    from interlingua.inference.api import load
    model = load(ours, "cpu")
    model.export_ctranslate2(out)
    return out, language_tag("de") if not model.target_in_source else ""


def fp32_counterpart(system: str, systems: list[str]) -> str | None:
    """The fp32 system of `systems` that `system` is timed against for skipping (None for an fp32 system, or
    where there is none): `/int8` dropped, or for ours the precision set to fp32, then the beam rule set to
    `all`, then the trailing options dropped one by one."""
    parts = system.split("/")
    if parts[0] != "interlingua":
        return "/".join(parts[:-1]) if parts[-1] == "int8" and "/".join(parts[:-1]) in systems else None
    if parts[1] == "fp32":
        return None
    options = parts[3:]
    for keep in range(len(options), -1, -1):
        for stop in dict.fromkeys([parts[2], "all"]):
            name = "/".join(["interlingua", "fp32", stop, *options[:keep]])
            if name in systems:
                return name
    return None


DEFAULT_SYSTEMS = ("ctranslate2,ctranslate2/int8,opennmt-py,opennmt-py/int8,ours-ct2/int8,"
                   "interlingua/fp32/all,interlingua/bf16/all,interlingua/int8/all,"
                   "interlingua/fp32/all/own-limit,interlingua/int8/all/own-limit,interlingua/int8/top/own-limit,"
                   "interlingua/int8/all/own-limit/shortlist,interlingua/int8/top/own-limit/shortlist")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ours", default=str(ROOT / "runs" / "bench_transformer" / "ours" / "last.pt"))
    ap.add_argument("--peer-ckpt", default=None,
                    help="default: the last model_step_*.pt of bench_transformer's peer run")
    ap.add_argument("--peer-dir", default=str(_peer.DEFAULT_PEER_DIR))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--beams", default="1,5")
    ap.add_argument("--systems", default=DEFAULT_SYSTEMS, help="comma-separated (see the module docstring)")
    ap.add_argument("--shortlist", default=None, help="default: <work>/shortlist.safetensors, built if absent")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--max-len", type=int, default=100)
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
    all_systems = args.systems.split(",")
    ct2_model = convert(peer_dir, peer_ckpt, work / "ct2_model") if any(
        s.startswith("ctranslate2") for s in all_systems) else None
    ours_ct2, ours_prefix = export_ours(args.ours, work / "ours_ct2") if any(
        s.startswith("ours-ct2") for s in all_systems) else (None, "")
    shortlist = args.shortlist or str(work / "shortlist.safetensors")
    if any("shortlist" in s.split("/") for s in all_systems) and not Path(shortlist).is_file():
        subprocess.run([sys.executable, "-m", "interlingua.cli", "shortlist", args.ours, "--out", shortlist],
                       check=True)
    spm_model = Path(args.ours).parent / "data" / "joint.model"
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=str(spm_model))

    for beam in [int(b) for b in args.beams.split(",")]:
        # greedy: the beam rule does not matter, so one of each otherwise equal system
        systems = [s for s in all_systems if beam > 1 or "/top" not in s]
        passes: dict[str, list[dict]] = {s: [] for s in systems}
        counterpart = {s: fp32_counterpart(s, systems) for s in systems}
        skipped: set[str] = set()
        for r in range(args.rounds):
            order = systems[r % len(systems):] + systems[:r % len(systems)]
            if r == 0:  # the fp32 counterparts first: their time bounds the others' (skip_after)
                order.sort(key=lambda s: counterpart[s] is not None)
            for system in [s for s in order if s not in skipped]:
                name = system.replace("/", "_")
                timeout = skip_after(passes.get(counterpart[system] or ""))
                try:
                    if system.startswith("ctranslate2"):
                        assert ct2_model is not None
                        res = ct2_pass(peer_dir, ct2_model, peer_src, work / f"{name}.beam{beam}.sp.de", beam, args,
                                       "int8" if system.endswith("/int8") else "float32", timeout=timeout)
                    elif system.startswith("ours-ct2"):
                        assert ours_ct2 is not None
                        res = ct2_pass(peer_dir, ours_ct2, peer_src, work / f"{name}.beam{beam}.sp.de", beam, args,
                                       "int8" if system.endswith("/int8") else "float32", ours_prefix, timeout)
                    elif system.startswith("opennmt-py"):
                        hyps = work / f"{name}.beam{beam}.sp.de"
                        res = _peer.translate(peer_dir, peer_ckpt, peer_src, hyps, beam=beam, threads=args.threads,
                                              batch_size=args.batch_size, max_length=args.max_len,
                                              int8=system.endswith("/int8"), timeout=timeout)
                        res["hyps"] = hyps
                    else:
                        parts = system.split("/")
                        res = timed_pass(args.ours, src="en", tgt="de", beam=beam, stop=parts[2],
                                         threads=args.threads, batch_size=args.batch_size,
                                         max_len=None if "own-limit" in parts else args.max_len, data=args.data,
                                         hyps_dir=work / name, precision=parts[1],
                                         shortlist=shortlist if "shortlist" in parts else None, timeout=timeout,
                                         workers=next((int(p[7:]) for p in parts if p.startswith("workers")), 1))
                except SKIPPABLE as err:
                    skipped.add(system)
                    append_result(args.out, {"kind": "skipped", "system": system, "beam": beam, "round": r + 1,
                                             "why": skip_reason(err), "fp32_counterpart": counterpart[system],
                                             "threads": args.threads})
                    continue
                passes[system].append(res)
                append_result(args.out, {"kind": "pass", "system": system, "beam": beam, "round": r + 1,
                                         "seconds": res["seconds"], "wall_incl_load_s": res["wall_incl_load_s"],
                                         "threads": args.threads,
                                         **({"output_kernel": res["output_kernel"]} if "output_kernel" in res else {})})
        for system in skipped:
            del passes[system]
        medians = {s: statistics.median(p["seconds"] for p in ps) for s, ps in passes.items()}

        def ratio(peer: str, system: str, medians: dict[str, float] = medians) -> float | None:
            return round(medians[peer] / medians[system], 3) if peer in medians else None

        for system, ps in passes.items():
            lines = ps[-1]["hyps"].read_text(encoding="utf-8").splitlines()
            hyps = lines if system.startswith("interlingua") else _peer.decode_pieces(spm_model, lines)
            bleu, chrf = corpus_scores(hyps, ref)
            tokens = sum(len(p) for p in sp.encode(hyps, out_type=str))
            best = min(p["seconds"] for p in ps)
            append_result(args.out, {
                "kind": "summary", "system": system, "beam": beam, "direction": "en-de",
                "checkpoint": str(peer_ckpt if system.startswith(("ctranslate2", "opennmt")) else args.ours),
                "sentences": len(ref), "target_tokens": tokens, "rounds": args.rounds,
                "seconds": [p["seconds"] for p in ps],
                "sent_per_s_best": round(len(ref) / best, 1), "sent_per_s_median": round(len(ref) / medians[system], 1),
                "tok_per_s_median": round(tokens / medians[system], 1),
                "vs_ct2_median": ratio("ctranslate2", system), "vs_ct2_int8_median": ratio("ctranslate2/int8", system),
                "vs_opennmt_median": ratio("opennmt-py", system),
                "vs_opennmt_int8_median": ratio("opennmt-py/int8", system),
                "bleu_lc": round(bleu, 2), "chrf_lc": round(chrf, 2), **output_stats(hyps),
                "threads": args.threads, "batch_size": args.batch_size, "max_len": args.max_len})


if __name__ == "__main__":
    main()
