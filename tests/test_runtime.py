"""The runtime decides device and precision in one place, from the request and the machine."""
from __future__ import annotations

import pytest
import torch
from conftest import tiny_config

from interlingua import runtime as rt
from interlingua.config import parse_config
from interlingua.errors import ConfigError
from interlingua.runtime import Runtime, resolve_device, resolve_device_precision


def _machine(monkeypatch, cuda=False, bf16=True, mps=False, gpus=1):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus if cuda else 0)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
    monkeypatch.setattr(rt, "_mps_available", lambda: mps)


@pytest.mark.parametrize("cuda, mps, expected", [(True, True, "cuda"), (False, True, "mps"), (False, False, "cpu")])
def test_auto_device_prefers_cuda_then_mps_then_cpu(monkeypatch, cuda, mps, expected):
    _machine(monkeypatch, cuda=cuda, mps=mps)
    assert resolve_device("auto") == torch.device(expected)


@pytest.mark.parametrize("request_, needle", [
    ("tpu", "unknown device 'tpu'"), ("cuda", "no CUDA GPU"), ("cuda:0", "no CUDA GPU"),
    ("mps", "MPS is not available")])
def test_unavailable_or_unknown_devices_are_clear_errors(monkeypatch, request_, needle):
    _machine(monkeypatch)
    with pytest.raises(ConfigError, match=needle):
        resolve_device(request_)


def test_a_gpu_index_beyond_the_visible_ones_is_an_error(monkeypatch):
    _machine(monkeypatch, cuda=True, gpus=2)
    assert resolve_device("cuda:1") == torch.device("cuda:1")
    with pytest.raises(ConfigError, match="only 2 CUDA GPU"):
        resolve_device("cuda:2")


@pytest.mark.parametrize("bf16, expected", [(True, "bf16"), (False, "fp16")])
def test_auto_precision_on_cuda_is_bf16_where_supported_else_fp16_with_a_scaler(monkeypatch, bf16, expected):
    _machine(monkeypatch, cuda=True, bf16=bf16)
    run = Runtime.create("cuda", "auto")
    assert run.precision == expected
    assert (run.grad_scaler() is not None) == (expected == "fp16")


def test_cpu_precision_follows_the_cpu_rule_and_fp16_needs_a_gpu(monkeypatch):
    _machine(monkeypatch)
    monkeypatch.setattr(rt, "resolve_precision", lambda p, *probe: {"auto": "fp32"}.get(p, p))
    assert Runtime.create("cpu", "auto").precision == "fp32"
    assert Runtime.create("cpu", "bf16").precision == "bf16"
    assert resolve_device_precision("auto", torch.device("mps")) == "fp32"
    with pytest.raises(ConfigError, match="fp16 needs a CUDA GPU"):
        Runtime.create("cpu", "fp16")
    with pytest.raises(ConfigError, match="unknown precision"):
        resolve_device_precision("int4", torch.device("cpu"))


def test_autocast_uses_the_resolved_dtype():
    lin = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    with Runtime(torch.device("cpu"), "bf16").autocast():
        assert lin(x).dtype == torch.bfloat16
    with Runtime(torch.device("cpu"), "fp32").autocast():
        assert lin(x).dtype == torch.float32
    assert Runtime(torch.device("cpu"), "bf16").grad_scaler() is None


def test_apply_sets_threads_and_seed_only_when_asked():
    before = torch.get_num_threads()
    try:
        Runtime(torch.device("cpu"), "fp32", threads=1, seed=5).apply()
        assert torch.get_num_threads() == 1
        a = torch.rand(3)
        Runtime(torch.device("cpu"), "fp32", seed=5).apply()
        assert torch.equal(a, torch.rand(3))
    finally:
        torch.set_num_threads(before)


def test_rng_state_round_trip_and_old_checkpoints_bare_state():
    run = Runtime(torch.device("cpu"), "fp32")
    state = run.rng_state()
    a = torch.rand(3)
    run.set_rng_state(state)
    assert torch.equal(a, torch.rand(3))
    bare = torch.get_rng_state()  # how checkpoints stored it before
    b = torch.rand(3)
    run.set_rng_state(bare)
    assert torch.equal(b, torch.rand(3))


def test_config_device_and_precision_are_validated(tmp_path):
    cfg = parse_config(tiny_config(tmp_path / "c.yaml", tmp_path, train={"device": "cpu", "precision": "fp16"}))
    assert cfg.train.device == "cpu" and cfg.train.precision == "fp16"
    with pytest.raises(ConfigError, match="train.precision"):
        parse_config(tiny_config(tmp_path / "c.yaml", tmp_path, train={"precision": "fp8"}))


def test_the_trainer_runs_where_the_runtime_says(multi30k_corpus, tmp_path, monkeypatch):
    from interlingua.training.build import build_run
    from interlingua.training.trainer import Trainer
    cfg = parse_config(tiny_config(multi30k_corpus, tmp_path, train={"device": "cpu", "precision": "fp32",
                                                                       "max_steps": 2, "valid_every": 2}))
    run = build_run(cfg)
    assert run.runtime.device == torch.device("cpu") and run.precision == "fp32"
    assert all(p.device.type == "cpu" for p in run.network.parameters())
    assert Trainer(run).train().steps == 2
    _machine(monkeypatch)
    bad = parse_config(tiny_config(multi30k_corpus, tmp_path / "gpu", train={"device": "cuda"}))
    with pytest.raises(ConfigError, match="no CUDA GPU"):
        build_run(bad)


def test_train_and_experiment_take_device_from_the_command_line(multi30k_corpus, tmp_path, capsys):
    import yaml

    from interlingua.cli import build_parser, main
    from interlingua.model_files.checkpoint import read_checkpoint
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(tiny_config(multi30k_corpus, tmp_path / "run",
                                                 train={"max_steps": 2, "valid_every": 2})))
    assert main(["train", str(config), "--device", "tpu"]) == 2
    assert "unknown device 'tpu'" in capsys.readouterr().err
    assert main(["train", str(config), "--device", "cpu"]) == 0
    assert read_checkpoint(tmp_path / "run" / "last.pt")["config"]["train"]["device"] == "cpu"
    args = build_parser().parse_args(["experiment", str(config), "--device", "cpu"])
    assert args.device == "cpu"
    assert build_parser().parse_args(["translate", "--model", "m.pt", "--src", "en", "--tgt", "de"]).device == "auto"
