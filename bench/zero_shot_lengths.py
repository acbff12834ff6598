"""Where a zero-shot direction loses against its pivot: output length (the brevity penalty) or n-gram precision,
and whether a penalty on ending a sentence changes the length.

Run: python bench/zero_shot_lengths.py CHECKPOINT [CHECKPOINT ...] [--split val] [--eos-penalties 0,4,8]
     [--min-ratios 0,0.8] [--data data/multi30k] [--out bench/results/zero_shot_lengths.jsonl]

For each model, split and penalty: greedy translation of en->de, en->fr and both zero-shot directions (de<->fr
directly and through English, both legs decoded alike), cased sacreBLEU (13a) with its brevity penalty, the
output-to-reference length ratio and the 1-4-gram precisions. The penalty is subtracted from the end-of-sentence
token's score at every greedy step (a probe of the search module's step decoder: a large penalty makes outputs
longer wherever the model's choice to stop was close). A minimum ratio r forbids the end of a sentence before
r times its source's subwords (as fairseq's `--min-len` or CTranslate2's `min_decoding_length` do for a fixed
count). One line per model, split, penalty and ratio. Choose on a dev split (`val`) before reading a test set.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sacrebleu  # noqa: E402
import torch  # noqa: E402
from _results import append_result  # noqa: E402

import interlingua.modules.search as search  # noqa: E402
from interlingua import load  # noqa: E402
from interlingua.data.corpus import read_lines  # noqa: E402

DIRECTIONS = (("en", "de", None), ("en", "fr", None), ("de", "fr", None), ("de", "fr", "en"), ("fr", "de", None),
              ("fr", "de", "en"))


@dataclass
class EndState:
    """A decoder state and, per row, the steps left before the end of the sentence may be chosen."""

    inner: Any
    left: torch.Tensor

    @property
    def batch_size(self) -> int:
        return self.inner.batch_size

    def select(self, index: torch.Tensor) -> EndState:
        return EndState(self.inner.select(index), self.left.index_select(0, index))

    def join(self, other: EndState) -> EndState:
        return EndState(self.inner.join(other.inner), torch.cat([self.left, other.left]))


class EndRules:
    """A step decoder whose end-of-sentence score is lowered by `penalty` at every step (greedy search ranks the
    step's scores, so the model stops only where the end leads the best other token by more than it), and given
    no score at all while a row's `EndState.left` is above 0 (a minimum length)."""

    def __init__(self, inner: Any, penalty: float):
        self.inner, self.penalty = inner, penalty

    def parameters(self) -> Any:
        return self.inner.parameters()

    def step(self, prev: torch.Tensor, state: EndState) -> tuple[torch.Tensor, EndState]:
        return self._ruled(self.inner.step, prev, state)

    def step_scores(self, prev: torch.Tensor, state: EndState) -> tuple[torch.Tensor, EndState]:
        return self._ruled(search._best_token_scores(self.inner), prev, state)  # noqa: SLF001 - the search's own

    def _ruled(self, step: Any, prev: torch.Tensor, state: EndState) -> tuple[torch.Tensor, EndState]:
        scores, inner = step(prev, state.inner)
        scores = scores.clone()
        scores[:, search.EOS] -= self.penalty
        scores[state.left > 0, search.EOS] = float("-inf")
        return scores, EndState(inner, state.left - 1)


@contextmanager
def end_rules(penalty: float, min_ratio: float) -> Iterator[None]:
    """Greedy search (the tails of batches decoded together, as `Model.translate` runs it) through `EndRules`, the
    minimum length `min_ratio` times each source's subwords (read back from its output limit, twice the source's
    subwords + 10 unless capped: `search.output_limits`). Both 0: the search as it is."""
    greedy = search.greedy_search_merging_tails

    def with_rules(decoder: Any, groups: Any, *args: Any, **kwargs: Any) -> Any:
        groups = ((keys, EndState(state, ((limits - 10) / 2 * min_ratio).floor().long()), limits)
                  for keys, state, limits in groups)
        return greedy(EndRules(decoder, penalty), groups, *args, **kwargs)

    if penalty or min_ratio:
        search.greedy_search_merging_tails = with_rules
    try:
        yield
    finally:
        search.greedy_search_merging_tails = greedy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoints", nargs="+")
    ap.add_argument("--split", default="val")
    ap.add_argument("--eos-penalties", default="0", help="penalties on the end-of-sentence score, comma-separated")
    ap.add_argument("--min-ratios", default="0", help="minimum output/source subword ratios, comma-separated")
    ap.add_argument("--data", default=str(ROOT / "data" / "multi30k"), help="Multi30k as `interlingua data` writes it")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "zero_shot_lengths.jsonl"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    text = {lang: read_lines(Path(args.data) / f"{args.split}.{lang}.gz") for lang in ("de", "en", "fr")}
    for ckpt in args.checkpoints:
        model = load(ckpt)
        settings = [(float(x), 0.0) for x in args.eos_penalties.split(",")]
        settings += [(0.0, float(x)) for x in args.min_ratios.split(",") if float(x)]
        for penalty, min_ratio in settings:
            rows: dict[str, dict[str, Any]] = {}
            with end_rules(penalty, min_ratio):
                for src, tgt, pivot in DIRECTIONS:
                    hyps = model.translate(text[src], src, tgt, pivot=pivot)
                    score = sacrebleu.corpus_bleu(hyps, [text[tgt]])
                    rows[f"{src}-{tgt}" + (" pivot" if pivot else "")] = {
                        "bleu": round(score.score, 2), "brevity_penalty": round(score.bp, 3),
                        "length_ratio": round(score.sys_len / score.ref_len, 3),
                        "precisions": [round(p, 1) for p in score.precisions]}
            append_result(args.out, {"bench": "zero_shot_lengths", "model": ckpt, "split": args.split,
                                     "eos_penalty": penalty, "min_ratio": min_ratio, "beam": 1,
                                     "bleu": "cased sacreBLEU 13a", **rows,
                                     "threads": args.threads})


if __name__ == "__main__":
    main()
