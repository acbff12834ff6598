"""Reading a run's dev BLEU off another run's dev-BLEU-against-dev-loss curve (`evaluation.dev_curves`),
and the experiment report's table of it."""
from __future__ import annotations

import pytest

from interlingua.evaluation.dev_curves import bleu_on_curve, offset_from_curve, training_path
from interlingua.experiment import dev_curve_markdown

# (dev loss, dev BLEU) in training order; the last validation overfits (loss rises again)
REFERENCE = [(4.0, 5.0), (3.0, 15.0), (2.5, 20.0), (2.0, 30.0), (2.2, 31.0)]


def test_the_training_path_keeps_the_validations_that_lowered_the_loss():
    assert training_path(REFERENCE) == REFERENCE[:4]
    assert training_path([]) == []
    assert training_path([(3.0, 1.0), (3.0, 2.0)]) == [(3.0, 1.0)]  # a tie is no improvement


def test_bleu_is_read_off_linearly_between_the_nearest_validations():
    assert bleu_on_curve(REFERENCE, 3.0) == 15.0  # at a validation
    assert bleu_on_curve(REFERENCE, 2.75) == pytest.approx(17.5)  # halfway between 3.0 and 2.5
    assert bleu_on_curve(REFERENCE, 2.1) == pytest.approx(28.0)  # 2.5 -> 2.0 is 20 -> 30; the 2.2 point is off the path
    assert bleu_on_curve(REFERENCE, 4.0) == 5.0 and bleu_on_curve(REFERENCE, 2.0) == 30.0  # the ends
    assert bleu_on_curve(REFERENCE, 4.5) is None and bleu_on_curve(REFERENCE, 1.9) is None  # never extrapolated
    assert bleu_on_curve([], 3.0) is None


def test_a_run_is_compared_at_its_lowest_dev_loss():
    run = [(3.5, 8.0), (2.75, 14.0), (2.9, 15.0)]
    offset = offset_from_curve(REFERENCE, run)
    assert offset is not None
    assert (offset.loss, offset.bleu) == (2.75, 14.0)
    assert offset.reference_bleu == pytest.approx(17.5) and offset.offset == pytest.approx(-3.5)
    beyond = offset_from_curve(REFERENCE, [(1.5, 40.0)])
    assert beyond is not None and beyond.reference_bleu is None and beyond.offset is None
    assert offset_from_curve(REFERENCE, []) is None


def _run(recipe: str, curve: list[tuple[float, float]]) -> dict:
    return {"recipe": recipe, "dev_curve": [[600 * (i + 1), loss, bleu] for i, (loss, bleu) in enumerate(curve)]}


def test_the_report_compares_every_run_with_the_baseline_curve():
    runs = [_run("residual", [(3.5, 8.0), (2.75, 14.0)]), _run("baseline", REFERENCE), _run("beyond", [(1.5, 40.0)])]
    lines = dev_curve_markdown(runs)
    assert lines[0] == "## Dev BLEU against dev loss"
    assert "| run | lowest dev loss | dev BLEU there | baseline at that loss | difference |" in lines
    assert "| residual | 2.750 | 14.00 | 17.50 | -3.50 |" in lines
    assert "| beyond | 1.500 | 40.00 | - | - |" in lines
    assert not any(line.startswith("| baseline |") for line in lines)
    # without a baseline the first run is the reference; one run alone, or runs without validations: no table
    assert "| run | lowest dev loss | dev BLEU there | residual at that loss | difference |" in dev_curve_markdown(
        [runs[0], runs[2]])
    assert dev_curve_markdown(runs[:1]) == [] and dev_curve_markdown([runs[0], _run("empty", [])]) == []
