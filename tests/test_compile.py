"""`train.compile`: the training forward compiled with torch.compile trains as the eager one does, resumes
exactly, leaves plain checkpoints, falls back to eager steps with one warning where compiling fails, and
`auto` follows its measurement.

Compiling takes seconds even for a tiny model, so one compiled run (`compiled`) serves every test that
needs one; the others stub the compiler or the measurement."""
from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import REPO, tiny_config
from test_resume import _assert_same_checkpoint, _metrics

from interlingua.config import parse_config
from interlingua.data.prepare import prepare
from interlingua.model_files.checkpoint import read_checkpoint
from interlingua.training import compiled as compiled_mod
from interlingua.training.build import build_run
from interlingua.training.trainer import Trainer, train

# A tiny Transformer (one graph per direction: LSTM kinds break the graph at every nn.LSTM) with dropout,
# whose masks a compiled step draws as an eager one does. Validations at 6 and 12.
SECTIONS = dict(
    preprocess={"max_valid_sentences": 8},
    model={"embed_dim": 32, "dropout": 0.2, "bridge": {"type": "none"},
           "encoder": {"type": "transformer", "layers": 1, "heads": 2, "ff_dim": 64},
           "decoder": {"type": "transformer", "layers": 1, "heads": 2, "ff_dim": 64}},
    train={"max_steps": 12, "valid_every": 6, "log_every": 3, "batch_size": 8, "lr": 0.002, "precision": "fp32"})


def _config(corpus, work, compile):
    cfg = tiny_config(corpus, work, **SECTIONS)
    cfg["train"]["compile"] = compile
    return parse_config(cfg)


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(f"{record.levelname} {record.name} {record.getMessage()}")


@pytest.fixture(scope="module")
def prepared(multi30k_corpus, tmp_path_factory):
    return prepare(_config(multi30k_corpus, tmp_path_factory.mktemp("data"), False))


@pytest.fixture(scope="module")
def compiled(multi30k_corpus, prepared, tmp_path_factory):
    """The compiled run, never stopped, and what it logged."""
    work = tmp_path_factory.mktemp("compiled")
    lines = _Lines()
    logger = logging.getLogger("interlingua")
    level = logger.level
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    try:
        train(_config(multi30k_corpus, work, True), data=prepared)
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)
    return work, lines.lines


@pytest.fixture(scope="module")
def eager(multi30k_corpus, prepared, tmp_path_factory):
    work = tmp_path_factory.mktemp("eager")
    train(_config(multi30k_corpus, work, False), data=prepared)
    return work


def _train_losses(work):
    return [(r["step"], r["loss"]) for r in _metrics(work) if r["type"] == "train"]


def test_compiled_training_follows_the_eager_loss_curve(compiled, eager):
    """Same dropout masks (the same generator, drawn in the same order), other kernels: the same losses up to
    float rounding, and the compile is logged once with its time and a graph for the one direction."""
    work, lines = compiled
    ours, theirs = _train_losses(work), _train_losses(eager)
    assert [s for s, _ in ours] == [s for s, _ in theirs] == [3, 6, 9, 12]
    assert [loss for _, loss in ours] == pytest.approx([loss for _, loss in theirs], rel=2e-3)
    compiled_lines = [line for line in lines if "compiled the training step in" in line]
    assert len(compiled_lines) == 1 and "(1 graph for 1 direction)" in compiled_lines[0], lines
    assert any("the compiled training step made 1 graph in this run" in line for line in lines), lines
    assert not any(line.startswith("WARNING") for line in lines), lines


def test_a_compiled_run_stopped_mid_step_resumes_exactly(multi30k_corpus, prepared, compiled, tmp_path, monkeypatch):
    """Ctrl-C in step 8 after its compiled forward and backward passes (the dropout masks drawn): the step is
    rolled back, last.pt saved at step 7; the resumed run ends bit-identical to the run never stopped."""
    reference, _ = compiled
    work = tmp_path / "run"
    clip = torch.nn.utils.clip_grad_norm_
    calls = {"n": 0}

    def clip_then_ctrl_c(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 8:
            raise KeyboardInterrupt
        return clip(*args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt, match="Ctrl-C at step 7: saved"):
        Trainer(build_run(_config(multi30k_corpus, work, True), data=prepared)).train()
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip)
    result = train(_config(multi30k_corpus, work, True), resume=True, data=prepared)
    assert result.steps == 12
    for name in ("last.pt", "best.pt"):
        _assert_same_checkpoint(reference / name, work / name)
    assert _metrics(work) == _metrics(reference)


def test_checkpoints_of_a_compiled_run_load_in_a_fresh_process_without_compiling(compiled, eager):
    """The weights are the network's own (no `_orig_mod.` prefix): a new process loads and translates with them
    without importing torch.compile's machinery."""
    work, _ = compiled
    keys = sorted(read_checkpoint(work / "best.pt")["model"])
    assert keys == sorted(read_checkpoint(eager / "best.pt")["model"])
    script = textwrap.dedent(f"""
        import sys
        from interlingua.inference.api import load
        model = load({str(work / 'best.pt')!r}, device="cpu")
        print(repr(model.translate(["a dog runs on the grass ."], src="en", tgt="de")[0]))
        print("compiler imported:", "torch._dynamo" in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "compiler imported: False" in done.stdout, done.stdout


def test_a_compile_failure_falls_back_to_eager_steps_with_one_warning(multi30k_corpus, prepared, eager, tmp_path,
                                                                     monkeypatch, caplog):
    """The compiler fails on the first graph (as without a C++ compiler): one warning line, no traceback, and
    the run trains eagerly from its first step, so it ends exactly where the eager run does."""
    def no_compiler(gm, example_inputs):
        raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found in torch._inductor.config.cpp.cxx")

    monkeypatch.setattr(compiled_mod, "inductor_backend", no_compiler)
    work = tmp_path / "run"
    with caplog.at_level(logging.INFO, logger="interlingua"):
        train(_config(multi30k_corpus, work, True), data=prepared)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    message = warnings[0].getMessage()
    assert "compiling the training step failed" in message and "No working C++ compiler" in message
    assert "\n" not in message and "Traceback" not in caplog.text
    assert not any("compiled the training step in" in r.getMessage() for r in caplog.records)
    for name in ("last.pt", "best.pt"):
        _assert_same_checkpoint(eager / name, work / name)


@pytest.mark.parametrize("speedup, compiles", [(1.5, True), (1.02, False)])
def test_auto_compiles_only_where_the_measurement_says_it_pays(multi30k_corpus, prepared, tmp_path, monkeypatch,
                                                              caplog, speedup, compiles):
    """`auto` with a stubbed measurement: compiled at 1.5x, eager at 1.02x (below 1.1x); the ratio and the
    choice are logged, and the next run reads the cached ratio instead of measuring again."""
    monkeypatch.setenv("INTERLINGUA_CACHE_DIR", str(tmp_path / "cache"))
    measured = []

    def probe(*args, **kwargs):
        def measure():
            measured.append(speedup)
            return speedup
        return measure

    monkeypatch.setattr(compiled_mod, "compile_probe", probe)
    for n in (1, 2):
        with caplog.at_level(logging.INFO, logger="interlingua.training.compiled"):
            run = build_run(_config(multi30k_corpus, tmp_path / f"run{n}", "auto"), data=prepared)
        run.close()
        assert (run.compiled is not None) == compiles
        assert measured == [speedup]  # the second run read the cache
        choice = "compiled" if compiles else "eager"
        assert f"train.compile auto -> {choice} (compiled, the training step of model transformer-none-transformer" \
            in caplog.text and f"(cpu fp32) ran at {speedup:.2f}x the speed of eager here" in caplog.text
        caplog.clear()
    cache = json.loads((tmp_path / "cache" / "precision.json").read_text())
    assert [entry["speedup"] for key, entry in cache.items() if "the training step of model" in key] == [speedup]
