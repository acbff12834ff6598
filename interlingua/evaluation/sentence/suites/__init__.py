"""The suites: which tasks run, on which data, under what time budget, and what the report shows.

`run_suite(name, embedders, data_root, out_dir)` evaluates every embedder on the suite's
tasks, writes `out_dir/<suite>.md` and `.json` and returns the result. A missing data set
is skipped with a note; an embedder lacking a language is skipped for the tasks needing it.
Each suite (one `<name>_suite.py` module here) supplies its tasks and tables; skeleton.py runs them all alike.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import cast

from interlingua.evaluation.sentence.features import PAIR_FEATURES
from interlingua.evaluation.sentence.probing import ProbeConfig
from interlingua.evaluation.sentence.protocol import CachedEmbedder, EmbedderLike, EvaluationError
from interlingua.evaluation.sentence.suites.context import Budget, Context
from interlingua.evaluation.sentence.suites.downstream_suite import Downstream
from interlingua.evaluation.sentence.suites.nli_suite import Nli
from interlingua.evaluation.sentence.suites.probing_suite import Probing
from interlingua.evaluation.sentence.suites.results import AllResult, SuiteResult, TaskRun, Timing
from interlingua.evaluation.sentence.suites.retrieval_suite import Retrieval
from interlingua.evaluation.sentence.suites.similarity_suite import Similarity
from interlingua.evaluation.sentence.suites.skeleton import Suite, Task
from interlingua.evaluation.sentence.suites.xnli_suite import XNLITransfer

__all__ = ["SUITES", "SUITE_ORDER", "AllResult", "Budget", "Context", "Suite", "SuiteResult", "Task", "TaskRun",
           "Timing", "run_all", "run_suite"]

_SUITES: dict[str, Suite] = {s.name: s for s in (Downstream(), Similarity(), Nli(), Probing(), XNLITransfer(),
                                                  Retrieval())}
SUITE_ORDER = tuple(_SUITES)
"""The order `all` runs the suites in."""


def run_all(ctx: Context) -> AllResult:
    """Every suite in turn (each also writes its own report); the encoders' caches are shared."""
    # SUITE_ORDER names the suites, not `all`: each gives a SuiteResult
    return AllResult(ctx.names, {name: cast(SuiteResult, _run_and_write(name, ctx)) for name in SUITE_ORDER})


SUITES: dict[str, Callable[[Context], SuiteResult | AllResult]] = {
    **{name: _SUITES[name].run for name in SUITE_ORDER}, "all": run_all}


def _run_and_write(name: str, ctx: Context) -> SuiteResult | AllResult:
    start = time.perf_counter()
    result = SUITES[name](ctx)
    result.total_elapsed_s = round(time.perf_counter() - start, 2)
    result.write(ctx.out_dir)
    return result


def run_suite(name: str, embedders: Mapping[str, EmbedderLike], data_root: Path, out_dir: Path, *, quick: bool = False,
              seed: int = 0, max_examples: int | None = None, probing_dir: Path | None = None,
              pair_features: str = "full", batch_size: int = 64, encode_threads: int | None = 1,
              per_head_embedders: list[str] | None = None, jobs: int = 1) -> SuiteResult | AllResult:
    """Evaluate `embedders` (name -> embedder) on suite `name`; writes out_dir/<name>.md and .json.

    `data_root` holds senteval_downstream/, xnli/, multi30k/ (and webis_cls10/ for probing
    text); `quick` and `max_examples` subsample for smoke runs; `probing_dir` holds official
    SentEval probing files (default: data_root/senteval_probing). `encode_threads` torch
    threads while an embedder encodes (None: leave as set); fits run on one thread.
    `per_head_embedders` limits per-head probing to those names (None: all with heads).
    `jobs` worker processes fit the probes (results do not depend on it).
    Returns an `AllResult` for `all`, else a `SuiteResult`."""
    if name not in SUITES:
        raise EvaluationError(f"unknown suite '{name}' (choose from {', '.join(SUITES)})")
    if not embedders:
        raise EvaluationError("no embedders to evaluate: pass at least one name -> embedder")
    if pair_features not in PAIR_FEATURES:
        raise EvaluationError(f"unknown pair_features '{pair_features}' (use one of {', '.join(PAIR_FEATURES)})")
    if jobs < 1:
        raise EvaluationError(f"jobs must be at least 1, got {jobs}")
    if max_examples is not None and max_examples < 10:
        raise EvaluationError(f"max_examples must be at least 10, got {max_examples}")
    data_root = Path(data_root)
    if not data_root.is_dir():
        raise EvaluationError(f"data root {data_root} is not a folder "
                              "(expected senteval_downstream/, xnli/, multi30k/ in it)")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    budget = Budget.make(quick, max_examples)
    probe = ProbeConfig() if budget.probe_checks is None else ProbeConfig(max_epochs=budget.probe_checks)
    ctx = Context(encoders={n: CachedEmbedder(n, e, batch_size, encode_threads) for n, e in embedders.items()},
                  data_root=data_root,
                  out_dir=out_dir, budget=budget, seed=seed, features=pair_features,
                  probing_dir=Path(probing_dir) if probing_dir else None, probe=probe,
                  per_head_embedders=None if per_head_embedders is None else list(per_head_embedders), jobs=jobs)
    return _run_and_write(name, ctx)
