"""`interlingua evaluate <suite> --model CKPT`: the sentence-vector suite on a checkpoint,
with the reference points (same architecture untrained, bag of subwords) beside it."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from interlingua.evaluation.registry import Report
from interlingua.evaluation.sentence import MissingDataError, reference_embedders, run_suite
from interlingua.evaluation.sentence.suites import AllResult, SuiteResult
from interlingua.inference.api import load
from interlingua.workers import usable_cores

log = logging.getLogger(__name__)


@dataclass
class SentenceEvaluation:
    """A suite's result on a checkpoint, and the seconds spent before it loading the model and references
    (not part of the suite's report, whose `total_elapsed_s` is the suite's own wall clock)."""

    result: SuiteResult | AllResult
    setup_elapsed_s: float

    @property
    def total_elapsed_s(self) -> float | None:
        return self.result.total_elapsed_s


def evaluate_sentence_vectors(suite: str, checkpoint: str | Path, data_root: Path, out_dir: str | Path | None = None,
                              quick: bool = False, references: bool = True, probing_dir: Path | None = None,
                              cache_dir: str | Path | None = None, jobs: int | None = None,
                              device: str = "cpu", precision: str = "fp32") -> SentenceEvaluation:
    """Run `suite` on the checkpoint's vectors (and its references); writes `<out_dir>/<suite>.md/.json`.

    What keeps `all` inside its 30-minute budget: per-head probing runs for the trained model
    only (not the untrained reference), and the bag-of-subwords reference is trained once and
    then loaded from `cache_dir` (default `<out_dir>/cache/bow-subword-<lines>`). `probing_dir`
    holds the official SentEval probing files (default `<data_root>/senteval_probing`).
    `jobs` worker processes fit the probes (default: one per usable core).
    `total_elapsed_s` is the suite's wall clock; `setup_elapsed_s` the seconds spent loading
    the model and building the references before it."""
    start = time.perf_counter()
    out = Path(out_dir) if out_dir else Path(checkpoint).parent / "eval"
    model = load(checkpoint, device, precision)
    embedders: dict = {"model": model}
    if references:
        embedders["untrained"] = model.untrained_like()
        max_lines = 2000 if quick else None
        cache = Path(cache_dir) if cache_dir else out / "cache" / f"bow-subword-{max_lines or 'all'}"
        try:
            embedders.update(reference_embedders(Path(data_root), max_lines=max_lines, cache_dir=cache))
        except MissingDataError as err:
            raise MissingDataError(
                f"{err}: the reference baselines learn from Multi30k's training text; get it with `interlingua data "
                f"multi30k --dest {Path(data_root) / 'multi30k'}`, point --data-root at the folder that holds "
                f"multi30k/, or leave the references out (--no-references)") from None
    setup = time.perf_counter() - start
    result = run_suite(suite, embedders, Path(data_root), out, quick=quick, probing_dir=probing_dir,
                       per_head_embedders=["model"], jobs=usable_cores() if jobs is None else jobs)
    log.info("suite '%s': %.1f s (plus %.1f s loading the model and references)", suite, result.total_elapsed_s, setup)
    return SentenceEvaluation(result, round(setup, 2))


def report_suite(suite: str, model: str, data_root: str, probing_dir: str | None, jobs: int | None, quick: bool,
                 no_references: bool, out: str | None, device: str, precision: str) -> Report:
    """`interlingua evaluate <suite>` (`registry.EVALUATIONS`): the suite's report under `out` (default:
    <model folder>/eval), with the suite's wall clock and the setup's time as notes."""
    out_dir = Path(out or Path(model).parent / "eval")
    run = evaluate_sentence_vectors(suite, model, data_root=Path(data_root), out_dir=out_dir, quick=quick,
                                    references=not no_references,
                                    probing_dir=Path(probing_dir) if probing_dir else None, jobs=jobs, device=device,
                                    precision=precision)
    md, js = out_dir / f"{suite}.md", out_dir / f"{suite}.json"
    notes = [f"wall clock: suite {run.total_elapsed_s:.1f} s, loading model and references {run.setup_elapsed_s:.1f} s"]
    return Report(md.read_text(encoding="utf-8"), run.result.to_dict(), [md, js], notes, result=run)
