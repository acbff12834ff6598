"""Stopping a run (SIGTERM, Ctrl-C, a crash) and resuming it ends exactly like a run never stopped.

One uninterrupted run is the reference; every other run is stopped somewhere (mid-step, during
the weight update, during a validation, between writing a metrics line and the checkpoints),
resumed, and then compared with it: last.pt and best.pt tensor by tensor, the training state,
the history and metrics.jsonl (wall-clock fields aside).
"""
from __future__ import annotations

import json
import os
import shutil
import signal

import pytest
import torch
import yaml
from conftest import tiny_config

from interlingua.cli import main
from interlingua.config import parse_config
from interlingua.data.prepare import prepare
from interlingua.errors import TrainingError
from interlingua.model_files.checkpoint import Checkpoint, read_checkpoint, save_atomic
from interlingua.training import trainer as trainer_mod
from interlingua.training import validation as validation_mod
from interlingua.training.build import build_run
from interlingua.training.signals import TrainingInterrupted
from interlingua.training.trainer import Trainer, train

# Validations at 8, 16 and 24 (the last step); train log lines every 5 steps, so a stop at
# step 12 falls between two validations and in the middle of a log window.
RUN = dict(directions={"mode": "explicit", "pairs": [["en", "de"], ["de", "en"]]},
           preprocess={"max_valid_sentences": 12},
           model={"dropout": 0.3},
           train={"max_steps": 24, "valid_every": 8, "log_every": 5, "batch_size": 8, "softmax_sample": 50})
WALL_CLOCK = {"elapsed_s", "tokens_per_s"}
LOSS_CALL_OF_STEP_13 = 15  # the validation at step 8 computes its dev loss with two calls, one a direction


def _config(corpus, work):
    return parse_config(tiny_config(corpus, work, **RUN))


@pytest.fixture(scope="module")
def straight(multi30k_corpus, tmp_path_factory):
    """The reference: the same run, never stopped (and its prepared data, shared by the others)."""
    work = tmp_path_factory.mktemp("straight")
    cfg = _config(multi30k_corpus, work)
    data = prepare(cfg)
    train(cfg, data=data)
    return work, data


def _metrics(work):
    return [{k: v for k, v in json.loads(line).items() if k not in WALL_CLOCK}
            for line in (work / "metrics.jsonl").read_text().splitlines()]


def _without_wall_clock(history):
    return [{k: v for k, v in rec.items() if k not in WALL_CLOCK} for rec in history]


def _assert_equal_tree(a, b, where):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _assert_equal_tree(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_equal_tree(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def _state(path):
    return Checkpoint.read(path).training


def _assert_same_checkpoint(a, b):
    pa, pb = Checkpoint.read(a), Checkpoint.read(b)
    _assert_equal_tree(pa.weights, pb.weights, f"{a.name} weights")
    sa, sb = pa.training.to_payload(), pb.training.to_payload()
    for st in (sa, sb):
        st.pop("elapsed")
        st["history"] = _without_wall_clock(st["history"])
        st["log_window"] = {k: v for k, v in st["log_window"].items() if k != "time"}
    _assert_equal_tree(sa, sb, f"{a.name} training state")


def assert_same_run(reference, resumed):
    for name in ("last.pt", "best.pt"):
        _assert_same_checkpoint(reference / name, resumed / name)
    assert _metrics(resumed) == _metrics(reference)
    assert [r["step"] for r in _metrics(reference) if r["type"] == "valid"] == [8, 16, 24]


def _call_then_ctrl_c(original, *args, **kwargs):
    """Hook action: the real call happens (the forward pass has drawn from the RNG, the batch is
    taken, the weights are updated), then Ctrl-C."""
    original(*args, **kwargs)
    raise KeyboardInterrupt


def _ctrl_c_instead(original, *args, **kwargs):
    """Hook action: Ctrl-C where the real call would have run."""
    raise KeyboardInterrupt


def _ctrl_c_in_step_13(trainer) -> None:
    """Ctrl-C inside step 13's forward pass: the step is rolled back and last.pt saved at step 12."""
    _call_hook(trainer.run.network, "loss", LOSS_CALL_OF_STEP_13, _call_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt, match="Ctrl-C at step 12: saved"):
        trainer.train()


def _call_hook(obj, name, at_call, action, monkeypatch=None):
    """Wrap obj.name so that its `at_call`-th call (1-based) runs `action` around the real call."""
    original = getattr(obj, name)
    calls = {"n": 0}

    def wrapper(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == at_call:
            return action(original, *args, **kwargs)
        return original(*args, **kwargs)

    (monkeypatch.setattr if monkeypatch is not None else setattr)(obj, name, wrapper)
    return calls


def _sigterm_mid_call(original, *args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)  # delivered at the next bytecode, inside this call
    return original(*args, **kwargs)


def _trainer(cfg, data):
    """The loop of a fresh run, built but not started (hooks go in between)."""
    return Trainer(build_run(cfg, data=data))


def _resume_and_finish(corpus, work, data):
    result = train(_config(corpus, work), resume=True, data=data)
    assert result.steps == 24


def test_sigterm_through_the_cli_resumes_exactly(multi30k_corpus, straight, tmp_path, capsys, monkeypatch):
    reference, _ = straight
    work = tmp_path / "run"
    shutil.copytree(reference / "data", work / "data")  # the prepared cache, reused as is
    cfg_path = tmp_path / "exp.yaml"
    cfg = tiny_config(multi30k_corpus, work, **RUN)
    cfg_path.write_text(yaml.safe_dump({**cfg, "train": {**cfg["train"], "curves": True}}))

    real_build = trainer_mod.build_run

    def build_then_arm(*args, **kwargs):  # SIGTERM in the forward pass of step 13
        run = real_build(*args, **kwargs)
        _call_hook(run.network, "loss", LOSS_CALL_OF_STEP_13, _sigterm_mid_call)
        return run

    monkeypatch.setattr(trainer_mod, "build_run", build_then_arm)
    handler_before = signal.getsignal(signal.SIGTERM)
    code = main(["train", str(cfg_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 128 + signal.SIGTERM
    assert err[-1] == f"interrupted: SIGTERM at step 12: saved {work / 'last.pt'}; continue with --resume"
    state = _state(work / "last.pt")
    assert state.step == 12 and [h.step for h in state.history] == [8]
    # No validation at the stop and no new best.pt: both still those of step 8.
    assert [r["step"] for r in _metrics(work) if r["type"] == "valid"] == [8]
    assert _state(work / "best.pt").history[-1].step == 8
    assert (work / "curves.png").stat().st_size > 1000  # drawn at the stop (validations draw at most every 30 s)
    assert signal.getsignal(signal.SIGTERM) == handler_before  # the trainer's handler is gone again

    monkeypatch.setattr(trainer_mod, "build_run", real_build)
    code = main(["train", str(cfg_path), "--resume"])
    assert code == 0 and "trained 24 steps" in capsys.readouterr().out
    assert_same_run(reference, work)


@pytest.fixture
def sigterm_noted():
    """A SIGTERM handler that only notes the signal, in place of the default action (which would end the test
    process) while a test sends SIGTERM at a moment no handler of the command's own may be in place."""
    noted: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: noted.append(signum))
    yield noted
    signal.signal(signal.SIGTERM, previous)


def test_sigterm_before_the_loop_is_one_line(multi30k_corpus, straight, tmp_path, capsys, monkeypatch, sigterm_noted):
    """SIGTERM while the run is still being built (data, model), before training's own handler: the command
    ends in one line with SIGTERM's exit status, not silently by the default action."""
    reference, _ = straight
    shutil.copytree(reference / "data", tmp_path / "run" / "data")  # the prepared cache, reused as is
    cfg_path = tmp_path / "exp.yaml"
    cfg_path.write_text(yaml.safe_dump(tiny_config(multi30k_corpus, tmp_path / "run", **RUN)))
    real_build = trainer_mod.build_run

    def sigterm_then_build(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        return real_build(*args, **kwargs)

    monkeypatch.setattr(trainer_mod, "build_run", sigterm_then_build)
    code = main(["train", str(cfg_path)])
    assert sigterm_noted == []  # the command's handler had it
    assert (code, capsys.readouterr().err.strip().splitlines()[-1]) == (128 + signal.SIGTERM, "interrupted: SIGTERM")


def test_sigterm_while_an_error_ends_training_keeps_the_errors_line(multi30k_corpus, tmp_path, capsys, monkeypatch,
                                                                    sigterm_noted):
    """A process of `train --processes N` whose peer died ends on an error after training put the handler
    before it back, and the launcher's SIGTERM can arrive just then: the error's line is still printed
    (before, the process ended without a word)."""
    cfg_path = tmp_path / "exp.yaml"
    cfg_path.write_text(yaml.safe_dump(tiny_config(multi30k_corpus, tmp_path / "run", **RUN)))
    lost = "process 0 of 2: another training process stopped answering in step 7: saved last.pt"

    def train_ending_on_an_error(*args, **kwargs):
        try:
            raise TrainingError(lost)
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # delivered here, with the error on its way out

    monkeypatch.setattr(trainer_mod, "train", train_ending_on_an_error)
    # Ctrl-C's own handler before the command, even where the suite was started with SIGINT ignored (in the
    # background), where the command's ignoring it at its end would look like a restored handler
    sigint = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        code = main(["train", str(cfg_path)])
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the command's handlers are gone again
    finally:
        signal.signal(signal.SIGINT, sigint)
    assert sigterm_noted == []
    assert (code, capsys.readouterr().err.strip().splitlines()) == (2, [f"error: {lost}"])


def test_ctrl_c_mid_step_resumes_exactly(multi30k_corpus, straight, tmp_path):
    reference, data = straight
    work = tmp_path / "run"
    _ctrl_c_in_step_13(_trainer(_config(multi30k_corpus, work), data))
    assert _state(work / "last.pt").step == 12
    assert [r["step"] for r in _metrics(work)] == [5, 8, 10]  # nothing at the stop
    _resume_and_finish(multi30k_corpus, work, data)
    assert_same_run(reference, work)


def test_sigterm_during_the_weight_update_finishes_that_step(multi30k_corpus, straight, tmp_path):
    reference, data = straight
    work = tmp_path / "run"
    trainer = _trainer(_config(multi30k_corpus, work), data)
    _call_hook(trainer.run.optimizer, "step", 13, _sigterm_mid_call)
    with pytest.raises(TrainingInterrupted, match="SIGTERM at step 13: saved") as info:
        trainer.train()
    assert info.value.signum == signal.SIGTERM
    assert _state(work / "last.pt").step == 13
    _resume_and_finish(multi30k_corpus, work, data)
    assert_same_run(reference, work)


def test_interrupt_raised_inside_the_weight_update_keeps_the_last_validation(multi30k_corpus, straight, tmp_path):
    reference, data = straight
    work = tmp_path / "run"
    trainer = _trainer(_config(multi30k_corpus, work), data)
    _call_hook(trainer.run.optimizer, "step", 13, _call_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt, match="last.pt left as it was"):
        trainer.train()
    assert _state(work / "last.pt").step == 8
    _resume_and_finish(multi30k_corpus, work, data)
    assert_same_run(reference, work)


def test_ctrl_c_during_a_validation_redoes_it(multi30k_corpus, straight, tmp_path, monkeypatch):
    reference, data = straight
    work = tmp_path / "run"
    trainer = _trainer(_config(multi30k_corpus, work), data)


    # Two directions: calls 3 and 4 are the validation at step 16.
    _call_hook(validation_mod, "evaluate_devset", 4, _ctrl_c_instead, monkeypatch)
    with pytest.raises(KeyboardInterrupt, match="Ctrl-C at step 16"):
        trainer.train()
    monkeypatch.undo()
    state = _state(work / "last.pt")
    assert state.step == 16 and [h.step for h in state.history] == [8]
    _resume_and_finish(multi30k_corpus, work, data)
    assert_same_run(reference, work)


def test_stop_between_a_metrics_line_and_the_checkpoints(multi30k_corpus, straight, tmp_path):
    """The validation at 16 is logged, then the run is stopped before it saves: on resume
    the orphan line is dropped and the validation done again, once."""
    reference, data = straight
    work = tmp_path / "run"
    trainer = _trainer(_config(multi30k_corpus, work), data)


    # _save calls: best.pt and last.pt at step 8 (a first validation always improves), then the
    # first write of step 16's validation, which is stopped.
    _call_hook(trainer.files, "save", 3, _ctrl_c_instead)
    with pytest.raises(KeyboardInterrupt, match="at step 16"):
        trainer.train()
    assert [r["step"] for r in _metrics(work) if r["type"] == "valid"] == [8, 16]  # the orphan line
    assert _state(work / "last.pt").history[-1].step == 8
    _resume_and_finish(multi30k_corpus, work, data)
    assert_same_run(reference, work)


def test_crash_after_the_last_checkpoint_drops_and_redoes_later_lines(multi30k_corpus, straight, tmp_path):
    """A run killed outright (no chance to save) resumes from the last validation's last.pt;
    metrics.jsonl lines written after it are dropped and written again exactly once."""
    reference, data = straight
    work = tmp_path / "run"
    trainer = _trainer(_config(multi30k_corpus, work), data)
    kept = {}
    real_save = trainer.files.save

    def save_and_keep(name, *args, **kwargs):
        path = real_save(name, *args, **kwargs)
        if name == "last.pt" and trainer.progress.step == 16 and not kept:
            kept["bytes"] = path.read_bytes()
        return path

    trainer.files.save = save_and_keep
    trainer.train()
    (work / "last.pt").write_bytes(kept["bytes"])  # as if killed after step 24 but before its save
    lines_before = [r["step"] for r in _metrics(work)]
    assert lines_before == [5, 8, 10, 15, 16, 20, 24]
    _resume_and_finish(multi30k_corpus, work, data)
    assert [r["step"] for r in _metrics(work)] == lines_before
    assert_same_run(reference, work)


def test_stop_before_the_first_checkpoint_then_start_again(multi30k_corpus, straight, tmp_path):
    """Interrupted inside the weight update of step 7 there is no checkpoint to go back to:
    the run is started again, and its log does not keep the stale line of step 5."""
    reference, data = straight
    work = tmp_path / "run"
    trainer = _trainer(_config(multi30k_corpus, work), data)
    _call_hook(trainer.run.optimizer, "step", 7, _call_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt, match="step 7: no checkpoint yet: start the run again"):
        trainer.train()
    assert not (work / "last.pt").exists() and [r["step"] for r in _metrics(work)] == [5]
    train(_config(multi30k_corpus, work), data=data)
    assert_same_run(reference, work)


def test_ctrl_c_mid_step_resumes_exactly_with_an_inverse_sqrt_schedule(multi30k_corpus, straight, tmp_path):
    """The lr schedule is part of the saved state: warm-up (10 steps) and decay go on where they stopped."""
    _, data = straight
    schedule = {"lr_schedule": "inverse_sqrt", "warmup_steps": 10}

    def config(work):
        return parse_config(tiny_config(multi30k_corpus, work, **{**RUN, "train": {**RUN["train"], **schedule}}))

    reference = tmp_path / "straight"
    train(config(reference), data=data)
    work = tmp_path / "run"
    _ctrl_c_in_step_13(_trainer(config(work), data))
    assert _state(work / "last.pt").lr_scheduler["last_epoch"] == 12
    assert train(config(work), resume=True, data=data).steps == 24
    assert_same_run(reference, work)
    lr = RUN["train"].get("lr", 0.005)
    logged = {r["step"]: r["lr"] for r in _metrics(work) if r["type"] == "train"}
    assert logged == pytest.approx({s: lr * min(s / 10, (10 / s) ** 0.5) for s in (5, 10, 15, 20)}, rel=1e-12)


def test_ctrl_c_mid_step_resumes_exactly_with_the_budget_decay(multi30k_corpus, straight, tmp_path):
    """`train.lr_decay_from` needs no state of its own: the resumed run's lr falls from where it stopped."""
    _, data = straight

    def config(work):
        return parse_config(tiny_config(multi30k_corpus, work, **{**RUN, "train": {**RUN["train"],
                                                                                   "lr_decay_from": 0.25}}))

    reference = tmp_path / "straight"
    train(config(reference), data=data)
    work = tmp_path / "run"
    _ctrl_c_in_step_13(_trainer(config(work), data))
    assert train(config(work), resume=True, data=data).steps == 24
    assert_same_run(reference, work)
    lr = RUN["train"].get("lr", 0.005)
    logged = {r["step"]: r["lr"] for r in _metrics(work) if r["type"] == "train"}
    assert logged == pytest.approx({s: lr * min(1, (1 - (s - 1) / 24) / 0.75) for s in (5, 10, 15, 20)}, rel=1e-12)


def test_ctrl_c_mid_step_resumes_exactly_with_agreement_on(multi30k_corpus, straight, tmp_path):
    """The agreement loss draws nothing from the RNG of its own, and its running sums are part of the
    saved log window: stopped at step 12 and resumed, the run ends as one never stopped."""
    _, data = straight
    agreement = {"agreement": {"weight": 3.0, "loss": "contrastive", "temperature": 0.2}}

    def config(work):
        return parse_config(tiny_config(multi30k_corpus, work, **{**RUN, "train": {**RUN["train"], **agreement}}))

    reference = tmp_path / "straight"
    train(config(reference), data=data)
    assert all("agreement" in r for r in _metrics(reference) if r["type"] == "train")
    work = tmp_path / "run"
    _ctrl_c_in_step_13(_trainer(config(work), data))
    result = train(config(work), resume=True, data=data)
    assert result.steps == 24
    assert_same_run(reference, work)


def test_a_checkpoint_with_its_history_as_json_text_resumes_exactly(multi30k_corpus, straight, tmp_path):
    """Checkpoints written before the history was stored as a list hold it as JSON text: they resume alike."""
    reference, data = straight
    work = tmp_path / "run"
    _ctrl_c_in_step_13(_trainer(_config(multi30k_corpus, work), data))
    payload = read_checkpoint(work / "last.pt")
    assert isinstance(payload["training"]["history"], list)
    payload["training"]["history"] = json.dumps(payload["training"]["history"])
    save_atomic(payload, work / "last.pt")
    assert [r.step for r in _state(work / "last.pt").history] == [8]
    _resume_and_finish(multi30k_corpus, work, data)
    assert_same_run(reference, work)


def test_a_resume_on_a_corpus_prepared_with_other_vocabularies_encodes_it_with_the_checkpoints(tmp_path, caplog):
    """The corpus changed after the run began (a line added), so preparing it again learned other vocabularies: the
    resumed run encodes the corpus with the ones its weights were trained with instead of reading every id as
    another subword (before, it went on silently on the new ids)."""
    from conftest import write_multiway_corpus
    en = [f"the dog number {i} runs to the {['park', 'house', 'lake'][i % 3]}" for i in range(80)]
    de = [f"der hund nummer {i} rennt zum {['park', 'haus', 'see'][i % 3]}" for i in range(80)]
    corpus = write_multiway_corpus(tmp_path, "c", {"train": {"en": en, "de": de}, "val": {"en": en[:8], "de": de[:8]}})
    cfg = parse_config(tiny_config(corpus, tmp_path / "run", preprocess={"vocab_size": 60, "max_len": 20},
                                   train={"max_steps": 2, "valid_every": 2, "log_every": 1}))
    train(cfg)
    stored = Checkpoint.read(tmp_path / "run" / "last.pt").load_vocabs()
    for lang, line in (("en", "zebras quickly jump over lazy foxes zebras"),
                       ("de", "zebras springen schnell über faule füchse zebras")):
        with open(tmp_path / f"train.{lang}", "a", encoding="utf-8") as f:
            f.write(line + "\n")
    assert prepare(cfg).vocabs["en"].proto != stored["en"].proto  # what the run would have read before
    longer = parse_config(tiny_config(corpus, tmp_path / "run", preprocess={"vocab_size": 60, "max_len": 20},
                                      train={"max_steps": 4, "valid_every": 2, "log_every": 1}))
    with caplog.at_level("WARNING", logger="interlingua.training.build"):
        run = build_run(longer, resume=True)
    try:
        assert "differ from those last.pt was trained with" in caplog.text
        assert {lang: v.proto for lang, v in run.data.vocabs.items()} == {lang: v.proto for lang, v in stored.items()}
        assert Trainer(run).train().steps == 4
    finally:
        run.close()
