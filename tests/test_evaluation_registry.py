"""The evaluations' one contract (`interlingua.evaluation.registry.EVALUATIONS`): every entry's function
takes exactly the options the entry declares, the command line's choices and dispatch come from the
table, options such as --precision reach every entry that declares them, and a new evaluation is one
function plus one registration."""
from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

from interlingua.cli import build_parser, main
from interlingua.errors import InterlinguaError
from interlingua.evaluation import registry
from interlingua.evaluation.registry import (
    DEVICE,
    EVALUATIONS,
    MODEL,
    OUT,
    PRECISION,
    Evaluation,
    Evaluations,
    Option,
    Report,
)


def _subparser(command: str):
    import argparse
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[command]


@pytest.mark.parametrize("name", list(EVALUATIONS))
def test_every_entry_function_takes_exactly_its_options(name):
    entry = EVALUATIONS[name]
    params = inspect.signature(entry.target()).parameters
    assert set(params) == {o.dest for o in entry.arguments} | set(entry.bound), name
    assert entry.target().__name__.startswith("report_")


def test_every_evaluate_entry_takes_the_device_and_the_precision():
    for name, entry in EVALUATIONS.of("evaluate").items():
        assert DEVICE in entry.options and PRECISION in entry.options, name


def test_the_sentence_entries_are_the_suites():
    from interlingua.evaluation.sentence import SUITES
    assert set(registry.SENTENCE_SUITES) == set(SUITES)
    assert {n for n, e in EVALUATIONS.items() if e.function.endswith(":report_suite")} == set(SUITES)


@pytest.mark.parametrize("command", ["evaluate", "analyze"])
def test_the_command_line_is_built_from_the_table(command):
    parser = _subparser(command)
    positional = next(a for a in parser._actions if a.dest == "evaluation")
    assert list(positional.choices) == list(EVALUATIONS.of(command))
    flags = {flag for a in parser._actions for flag in a.option_strings}
    assert {o.flag for o in EVALUATIONS.options(command) if o.flag.startswith("-")} <= flags


def _recorders(monkeypatch, command: str) -> dict[str, dict]:
    """Every entry of `command`'s function replaced by one that records what it was given."""
    seen: dict[str, dict] = {}
    for name, entry in EVALUATIONS.of(command).items():
        module, _, function = entry.function.partition(":")

        def record(_name=name, **kwargs) -> Report:
            key = kwargs.get("suite", _name)  # the sentence suites share one function
            seen.setdefault(key, {}).update(kwargs)
            return Report(f"# {key}", {}, [Path("a.md")], ["note"])
        monkeypatch.setattr(importlib.import_module(module), function, record)
    return seen


def test_each_option_reaches_every_evaluate_entry_that_declares_it(monkeypatch, capsys):
    seen = _recorders(monkeypatch, "evaluate")
    for name, entry in EVALUATIONS.of("evaluate").items():
        assert main(["evaluate", name, "--model", "m.pt", "--precision", "bf16", "--device", "cpu",
                     "--out", "o"]) == 0
        given = seen[name]
        assert set(given) == {o.dest for o in entry.arguments} | set(entry.bound), name
        assert given["precision"] == "bf16" and given["device"] == "cpu" and given["out"] == "o"
        assert capsys.readouterr().out == f"# {name}\nwritten: a.md\nnote\n"
    assert seen["probing"]["suite"] == "probing"


def test_each_option_reaches_every_analyze_entry_that_declares_it(monkeypatch, capsys):
    seen = _recorders(monkeypatch, "analyze")
    assert main(["analyze", "heads", "--model", "a=x.pt", "--model", "y.pt", "-i", "s.txt", "--device", "cpu"]) == 0
    assert seen["heads"]["model"] == ["a=x.pt", "y.pt"] and seen["heads"]["input"] == "s.txt"
    assert main(["analyze", "encoder", "c.pt", "--max-sentences", "3", "--languages", "en", "de"]) == 0
    assert seen["encoder"]["checkpoint"] == "c.pt" and seen["encoder"]["languages"] == ["en", "de"]
    assert seen["encoder"]["max_sentences"] == 3


@pytest.mark.parametrize("analysis", ["heads", "lengths", "encoder"])
def test_every_analysis_takes_its_model_as_the_argument_or_as_model(analysis, monkeypatch):
    seen = _recorders(monkeypatch, "analyze")
    assert main(["analyze", analysis, "runs/a/best.pt"]) == 0
    assert seen[analysis]["checkpoint"] == "runs/a/best.pt" and seen[analysis]["model"] is None
    assert main(["analyze", analysis, "--model", "b=m.pt"]) == 0
    assert seen[analysis]["checkpoint"] is None and seen[analysis]["model"] == ["b=m.pt"]
    assert registry.named_checkpoints(["b=m.pt", "m.pt"], analysis, "runs/a/best.pt") == {
        "a": Path("runs/a/best.pt"), "b": Path("m.pt"), "m": Path("m.pt")}
    with pytest.raises(InterlinguaError, match="two models named 'a' .*--model NAME=CKPT"):
        registry.named_checkpoints(["runs/a/last.pt"], analysis, "runs/a/best.pt")  # one would hide the other


@pytest.mark.parametrize("analysis", ["heads", "lengths", "encoder"])
def test_an_analysis_without_a_model_says_both_ways_to_give_one(analysis, capsys):
    assert main(["analyze", analysis]) == 2
    error = capsys.readouterr().err
    assert f"analyze {analysis} needs a model: interlingua analyze {analysis} CKPT, or --model" in error


def test_the_encoder_analysis_takes_one_model(tmp_path, capsys):
    assert main(["analyze", "encoder", str(tmp_path / "a.pt"), "--model", f"b={tmp_path / 'b.pt'}"]) == 2
    assert "analyze encoder analyses one model (2 given)" in capsys.readouterr().err


def test_threads_is_applied_by_the_command_line_not_passed(monkeypatch):
    import torch
    seen = _recorders(monkeypatch, "evaluate")
    before = torch.get_num_threads()
    try:
        assert main(["evaluate", "bleu", "--model", "m.pt", "--threads", "1"]) == 0
        assert torch.get_num_threads() == 1 and "threads" not in seen["bleu"]
    finally:
        torch.set_num_threads(before)


def report_echo(model: str, out: str | None, device: str, precision: str) -> Report:
    """A throw-away evaluation: what an evaluation module provides."""
    return Report(f"# echo {model} {precision}", {"model": model}, [Path(out or ".") / "echo.md"])


def test_a_new_evaluation_is_one_function_and_one_registration(monkeypatch, capsys):
    table = Evaluations()
    for entry in EVALUATIONS.values():
        table.register(entry)
    table.register(Evaluation("echo", "evaluate", "repeat the model's name", f"{__name__}:report_echo",
                              (MODEL, OUT, DEVICE, PRECISION)))
    monkeypatch.setattr(registry, "EVALUATIONS", table)
    assert main(["evaluate", "echo", "--model", "m.pt", "--precision", "fp16"]) == 0
    assert capsys.readouterr().out.splitlines() == ["# echo m.pt fp16", "written: echo.md"]


def test_one_flag_is_one_option_within_a_command():
    table = Evaluations()
    table.register(Evaluation("a", "evaluate", "", "m:f", (Option("--out", help="x"),)))
    with pytest.raises(Exception, match="--out"):
        table.register(Evaluation("b", "evaluate", "", "m:f", (Option("--out", help="y"),)))
    table.register(Evaluation("c", "analyze", "", "m:f", (Option("--out", help="y"),)))  # another command
    with pytest.raises(Exception, match="twice"):
        table.register(Evaluation("a", "analyze", "", "m:f", ()))
