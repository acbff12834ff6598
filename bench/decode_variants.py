"""The decoding step's own changes (Transformer and LSTM), each on and off in one process: sentences/s and identical
outputs.

Run: python bench/decode_variants.py --model runs/bench_transformer/ours/last.pt [--beam 1] [--rounds 8]
     [--threads 2] [--sentences 1000] [--max-len N] [--precision fp32|int8]
     [--variants before,eval-step,scores,both,tails,fused-beams,rows-beams,beams]
     [--out bench/results/decode_variants.jsonl]

Variants (the library's code with parts of it put back as they were before them):
- `before`: the decoder layers' own forward at every step (module calls, closures), and greedy search on
  log-probabilities;
- `eval-step`: the decoder's eval step (`DecoderLayer.step`: the same products without the module calls);
- `scores`: greedy search on the step's unnormalised scores (`Decoder.step_scores`, no log_softmax);
- `both`: the two together, each batch decoded to its end on its own;
- `tails`: the tails of batches decoded together (`modules.search._merging_tails`), a beam step's attention by
  PyTorch's fused kernel (`fused-beams` is the same);
- `rows-beams`: a Transformer beam step's cross-attention written out (`modules.transformer.beam_step_attention`), the
  LSTM decoder's hypotheses each attending over a copy of their sentence's memory (as every variant above);
- `beams`: the library as it is: the LSTM decoder's hypotheses attend together over their sentence's one memory
  (`modules.decoders.DecoderState.expand_beams`).
Passes over test_2016_flickr (en->de by default) alternate between the variants (the order reversed every other
round), all in one process with the allocator as the command line sets it, so that the machine's drift falls
on all alike. One JSON line per variant: the pass times, the median sentences/s, its ratio to `before`, and
whether its translations equal `before`'s, sentence for sentence.
"""
from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from _decoding import decoding_parser  # noqa: E402
from _results import append_result  # noqa: E402

import interlingua.modules.search as search  # noqa: E402
import interlingua.modules.transformer as transformer  # noqa: E402
from interlingua.data.corpus import read_lines  # noqa: E402
from interlingua.inference.api import load  # noqa: E402
from interlingua.modules.decoders import DecoderState  # noqa: E402
from interlingua.modules.transformer import DecoderLayer, LayerCache  # noqa: E402

EVAL_STEP = DecoderLayer.step
SCORES = search._best_token_scores
BEAMS = transformer.beam_step_attention
EXPAND = DecoderState.expand_beams
ROWS = DecoderState.select  # the LSTM state's expand_beams as it was: every row its own copy of the memory


JOINABLE = search.joinable


def _layers_forward(self: DecoderLayer, x: torch.Tensor, cache: LayerCache, memory_mask: torch.Tensor,
                    self_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, LayerCache]:
    """The step as it was: the layer's forward through its module call, incremental (batches decoded alone:
    no rows joined, so no `self_mask`)."""
    assert self_mask is None
    return self(x, cache, memory_mask, True)


def _log_probabilities(decoder: Any) -> Callable[..., Any]:
    return decoder.step


def _alone(state: Any) -> bool:
    return False


def _fused_beams(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """A beam step's attention as it was: PyTorch's fused kernel."""
    return transformer.attention(q, k, v, mask)


VARIANTS = {"before": (_layers_forward, _log_probabilities, _alone, _fused_beams, ROWS),
            "eval-step": (EVAL_STEP, _log_probabilities, _alone, _fused_beams, ROWS),
            "scores": (_layers_forward, SCORES, _alone, _fused_beams, ROWS),
            "both": (EVAL_STEP, SCORES, _alone, _fused_beams, ROWS),
            "tails": (EVAL_STEP, SCORES, JOINABLE, _fused_beams, ROWS),
            "fused-beams": (EVAL_STEP, SCORES, JOINABLE, _fused_beams, ROWS),
            "rows-beams": (EVAL_STEP, SCORES, JOINABLE, BEAMS, ROWS),
            "beams": (EVAL_STEP, SCORES, JOINABLE, BEAMS, EXPAND)}


def use(variant: str) -> None:
    (DecoderLayer.step, search._best_token_scores, search.joinable,  # type: ignore[method-assign]
     transformer.beam_step_attention, DecoderState.expand_beams) = VARIANTS[variant]


def main() -> None:
    ap = decoding_parser(__doc__)
    ap.add_argument("--beam", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sentences", type=int, default=1000)
    ap.add_argument("--max-len", type=int, default=None, help="output limit (default: the library's own)")
    ap.add_argument("--precision", choices=("fp32", "int8"), default="fp32")
    ap.add_argument("--variants", default="before,eval-step,scores,both,tails,beams")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "decode_variants.jsonl"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    names = args.variants.split(",")
    model = load(args.model, device="cpu", precision=args.precision)
    texts = read_lines(Path(args.data) / f"test_2016_flickr.{args.src}.gz")[:args.sentences]
    times: dict[str, list[float]] = {n: [] for n in names}
    outputs: dict[str, list[str]] = {}
    for name in names:  # warm-up: kernels, packed layers
        use(name)
        model.translate(texts[:64], src=args.src, tgt=args.tgt, beam=args.beam, max_len=args.max_len)
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            use(name)
            start = time.perf_counter()
            outputs[name] = model.translate(texts, src=args.src, tgt=args.tgt, beam=args.beam, max_len=args.max_len)
            times[name].append(time.perf_counter() - start)
    use("beams")
    base = statistics.median(times[names[0]])
    for name in names:
        median = statistics.median(times[name])
        record = {"kind": "decode_variant", "variant": name, "model": args.model, "precision": args.precision,
                  "direction": f"{args.src}-{args.tgt}",
                  "beam": args.beam, "max_len": args.max_len, "sentences": len(texts), "threads": args.threads,
                  "rounds": args.rounds,
                  "seconds": [round(t, 3) for t in times[name]], "sent_per_s_median": round(len(texts) / median, 1),
                  f"x_{names[0]}": round(base / median, 3),
                  f"identical_to_{names[0]}": outputs[name] == outputs[names[0]]}
        append_result(args.out, record)


if __name__ == "__main__":
    main()
