"""A dev validation's record, typed (`interlingua.records`): it is stored as it always was (metrics.jsonl
lines, a checkpoint's history), older records still read, a malformed one is one clear error, and no module
of interlingua/ or bench/ but `records.py` looks into a validation dict by key.
"""
from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import pytest
from conftest import tiny_config
from test_layers import PACKAGE

from interlingua.config import parse_config
from interlingua.errors import RecordError
from interlingua.figures import plot_training_curves
from interlingua.model_files.checkpoint import read_checkpoint
from interlingua.records import DevScores, Validation, read_validations
from interlingua.training.trainer import train

OWN = PACKAGE / "records.py"
SOURCES = sorted(p for p in [*PACKAGE.rglob("*.py"), *(PACKAGE.parent / "bench").rglob("*.py")] if p != OWN)

VALIDATION_KEYS = {"mean_bleu", "mean_loss", "zero_resource"}
"""Keys that only a validation record has: read by key, a validation dict is being looked into."""


def validation_key_reads(path: Path) -> list[str]:
    """`line: what` for each place in the file that reads a validation record's keys: one of
    `VALIDATION_KEYS`, or the per-direction scores under "directions" (`["directions"]` iterated as a
    mapping or indexed by name; a list of direction pairs or a config section is not)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        key = _read_key(node)
        if key in VALIDATION_KEYS:
            found.append(f"{node.lineno}: {key!r}")
        elif key == "directions" and _used_as_scores(node, parents):
            found.append(f"{node.lineno}: 'directions' scores")
    return sorted(set(found), key=lambda s: (int(s.partition(":")[0]), s))


def _read_key(node: ast.AST) -> str | None:
    """The constant key `node` reads: `x["key"]` (not assigned to), `x.get("key", ...)`, `x.pop("key", ...)`."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        key = node.slice
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "pop")
          and node.args):
        key = node.args[0]
    else:
        return None
    return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None


def _used_as_scores(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Whether the value read is used as a mapping of per-direction scores: `.items()` / `.values()`, or
    `.get(name)` / `[name]` with a key that is not a constant."""
    parent = parents.get(node)
    if isinstance(parent, ast.Attribute) and parent.value is node:
        if parent.attr in ("items", "values"):
            return True
        call = parents.get(parent)
        return (parent.attr == "get" and isinstance(call, ast.Call) and bool(call.args)
                and not isinstance(call.args[0], ast.Constant))
    return isinstance(parent, ast.Subscript) and parent.value is node and not isinstance(parent.slice, ast.Constant)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_no_module_but_records_reads_a_validation_by_key(path):
    found = validation_key_reads(path)
    assert not found, (f"{path.relative_to(PACKAGE.parent)} reads a validation record by key; read "
                       f"interlingua.records.Validation fields (Validation.from_json, read_validations):\n"
                       + "\n".join(found))


def test_the_guard_sees_what_it_looks_for(tmp_path):
    """Each way of looking into a validation dict is reported, and the other dicts with a "directions" key
    are not (so that a clean result above means something)."""
    probe = tmp_path / "probe.py"
    probe.write_text("best = max(valid, key=lambda r: r['mean_bleu'])\n"
                     "loss = rec.get('mean_loss')\n"
                     "for name, r in rec['directions'].items(): pass\n"
                     "bleu = [r['directions'].get(name, {}) for r in valid]\n"
                     "marked = rec['directions'][name]['zero_resource']\n"
                     "scores = rec.get('directions', {}).values()\n"
                     "pairs = [tuple(d) for d in meta['directions']]\n"
                     "tgt = meta['directions'][0][1]\n"
                     "section = cfg.get('directions') or {}\n"
                     "held = cfg['directions'].get('held_out', [])\n"
                     "out = {'mean_bleu': v.mean_bleu}\n"
                     "c['compute']['directions'] = 3\n", encoding="utf-8")
    assert validation_key_reads(probe) == ["1: 'mean_bleu'", "2: 'mean_loss'", "3: 'directions' scores",
                                           "4: 'directions' scores", "5: 'directions' scores", "5: 'zero_resource'",
                                           "6: 'directions' scores"]


# -- the stored shape ---------------------------------------------------------------------------------

RECORD = Validation(step=40, mean_bleu=12.5, mean_loss=3.25, elapsed_s=81.5, directions={
    "de-en": DevScores(loss=3.25, ppl=25.79, bleu=12.5, chrf=40.0),
    "de-fr": DevScores(loss=4.5, ppl=90.0, bleu=3.0, chrf=20.5, zero_shot=True, zero_resource=True),
    "fr-de": DevScores(loss=None, ppl=None, bleu=1.0, chrf=None, zero_shot=True)})


def test_a_record_round_trips_in_todays_shape():
    stored = RECORD.to_json()
    assert Validation.from_json(stored) == RECORD
    assert Validation.from_json(json.loads(json.dumps(stored))) == RECORD
    assert list(stored) == ["type", "step", "mean_bleu", "mean_loss", "directions", "elapsed_s"]
    assert stored["type"] == "valid"
    assert stored["directions"]["de-fr"] == {"loss": 4.5, "ppl": 90.0, "bleu": 3.0, "chrf": 20.5, "zero_shot": True,
                                             "zero_resource": True}
    assert "elapsed_s" not in Validation(step=2).to_json()  # only where the trainer recorded it
    assert RECORD.zero_shot_bleu == 2.0 and Validation(step=2).zero_shot_bleu is None


def test_older_records_read_with_defaults(tmp_path):
    """The first versions wrote no `mean_loss` or `zero_resource`; a checkpoint's history may lack `type`;
    a run without dev pairs once logged NaN; hand-made records hold less."""
    first = {"type": "valid", "step": 8, "mean_bleu": 1.5, "elapsed_s": 3.0,
             "directions": {"en-de": {"loss": 5.0, "ppl": 148.4, "bleu": 1.5, "chrf": 20.0, "zero_shot": False}}}
    v = Validation.from_json(first)
    assert (v.step, v.mean_bleu, v.mean_loss, v.elapsed_s) == (8, 1.5, None, 3.0)
    assert v.directions == {"en-de": DevScores(loss=5.0, ppl=148.4, bleu=1.5, chrf=20.0)}
    assert Validation.from_json({"step": 6, "mean_loss": 2.0}) == Validation(step=6, mean_loss=2.0)
    nan = Validation.from_json({"type": "valid", "step": 4, "mean_bleu": float("nan"), "directions": {}})
    assert nan.mean_bleu is not None and math.isnan(nan.mean_bleu)
    partial = Validation.from_json({"step": 2, "directions": {"xa-xb": {"bleu": 7.5, "chrf": 30.25}}})
    assert partial.directions["xa-xb"] == DevScores(bleu=7.5, chrf=30.25)
    log = tmp_path / "metrics.jsonl"
    lines = [{"type": "train", "step": 8, "loss": 4.0, "penalty": 0.5}, first,
             {"type": "stop", "step": 9, "reason": "non-finite loss"}]
    log.write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"type": "val')
    assert read_validations(log) == [v]  # a last line cut short is dropped
    assert read_validations(tmp_path / "none.jsonl") == []
    log.write_text(log.read_text().rpartition("\n")[0] + "\n")
    plot_training_curves(log, tmp_path / "curves.png")  # the curves of an old run still draw
    assert (tmp_path / "curves.png").stat().st_size > 0


@pytest.mark.parametrize("stored, message", [
    (["valid", 4], "a validation record must be a mapping, not list"),
    ({"type": "valid", "mean_bleu": 1.0}, "needs a whole-number 'step', not None"),
    ({"step": "4"}, "needs a whole-number 'step', not '4'"),
    ({"type": "train", "step": 4}, "validation record of step 4: its type is 'train', not 'valid'"),
    ({"step": 4, "mean_bleu": "high"}, "validation record of step 4: 'mean_bleu' is not a number: 'high'"),
    ({"step": 4, "directions": [["de", "en"]]}, "validation record of step 4: 'directions' is not a mapping"),
    ({"step": 4, "directions": {"de-en": {"chrf": 3.0}}}, "step 4, direction de-en: no 'bleu'"),
    ({"step": 4, "directions": {"de-en": 3.0}}, "step 4, direction de-en: not a mapping but float"),
    ({"step": 4, "directions": {"de-en": {"bleu": 3.0, "zero_shot": "no"}}},
     "step 4, direction de-en: 'zero_shot' is not true or false: 'no'"),
])
def test_a_malformed_record_is_one_clear_error(stored, message):
    with pytest.raises(RecordError) as err:
        Validation.from_json(stored)
    assert message in str(err.value)
    assert isinstance(err.value, ValueError)  # what readers that tolerate a bad log already catch


def test_a_malformed_line_of_a_log_is_named(tmp_path):
    log = tmp_path / "metrics.jsonl"
    log.write_text(json.dumps({"type": "valid", "step": 2}) + "\n" + json.dumps({"type": "valid", "step": None})
                   + "\n" + json.dumps({"type": "train", "step": 3}) + "\n")
    with pytest.raises(RecordError, match=r"metrics.jsonl, line 2: a validation record needs a whole-number 'step'"):
        read_validations(log)


def test_a_real_run_logs_and_keeps_exactly_the_typed_record(multi30k_corpus, tmp_path):
    """What training writes (metrics.jsonl, the checkpoint's history, `TrainResult.history`) is the typed
    record's `to_json`, and reads back equal."""
    work = tmp_path / "run"
    cfg = tiny_config(multi30k_corpus, work, preprocess={"max_valid_sentences": 8},
                      directions={"mode": "explicit", "pairs": [["en", "de"]], "monolingual": True},
                      train={"max_steps": 4, "valid_every": 2, "log_every": 2})
    result = train(parse_config(cfg))
    lines = [json.loads(line) for line in (work / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in lines if r["type"] == "valid"]
    assert [v.to_json() for v in result.history] == logged and len(logged) == 2
    assert read_validations(work / "metrics.jsonl") == result.history
    assert [Validation.from_json(r) for r in logged] == result.history
    assert read_checkpoint(work / "last.pt")["training"]["history"] == logged
    last = result.history[-1]
    assert last.elapsed_s is not None and last.mean_bleu is not None and last.mean_loss is not None
    assert {name for name, s in last.directions.items() if s.zero_shot} == {"de-en"}
    assert set(logged[-1]["directions"]["en-de"]) == {"loss", "ppl", "bleu", "chrf", "zero_shot", "zero_resource"}


def test_a_run_without_penalty_or_agreement_plots_its_dev_loss_in_the_middle(tmp_path, monkeypatch):
    """A bridge-less run (penalty 0 throughout, no agreement) shows its dev loss where a bridge run shows
    its penalty: a flat line at zero says nothing."""
    import interlingua.figures as figures
    titles: list[str] = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, out, **_: titles.append(fig.axes[1].get_title()))
    valid = {"type": "valid", "step": 8, "mean_bleu": 1.5, "mean_loss": 5.0,
             "directions": {"en-de": {"loss": 5.0, "bleu": 1.5, "zero_shot": False}}}
    for penalty in (0.0, 0.5):
        log = tmp_path / f"metrics_{penalty}.jsonl"
        log.write_text("".join(json.dumps(r) + "\n" for r in
                               [{"type": "train", "step": 8, "loss": 4.0, "penalty": penalty}, valid]))
        plot_training_curves(log, tmp_path / "curves.png")
    assert titles == ["dev loss (mean of the selected directions)", "bridge penalty ||AA^T - I||^2"]
