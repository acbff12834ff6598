"""Inference precision: fp32 by default, bf16 / auto on request, fp16 refused without a GPU."""
import numpy as np
import pytest

import interlingua
from interlingua.cli import main
from interlingua.errors import ConfigError
from interlingua.inference.decoding_probe import decoding_bf16_speedup
from interlingua.precision import cpu_has_native_bf16

SENTENCES = ["a man is riding a bike .", "two dogs play in the snow .", "a woman sings on a stage ."]


def test_default_is_fp32_and_bf16_gives_the_same_kind_of_output(trained_model):
    fp32 = interlingua.load(trained_model, "cpu")
    bf16 = interlingua.load(trained_model, "cpu", precision="bf16")
    assert (fp32.runtime.precision, bf16.runtime.precision) == ("fp32", "bf16")
    out = bf16.translate(SENTENCES, "en", "de", beam=3)
    assert len(out) == 3 and all(isinstance(x, str) for x in out)
    a, b = fp32.encode(SENTENCES, "en"), bf16.encode(SENTENCES, "en")
    assert b.dtype == np.float32 and a.shape == b.shape
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cos.min() > 0.99  # rounding, not another model
    assert bf16.untrained_like().runtime.precision == "bf16"


def test_fp16_without_a_gpu_is_one_clear_error(trained_model, capsys, tmp_path):
    with pytest.raises(ConfigError, match="fp16 needs a CUDA GPU"):
        interlingua.load(trained_model, "cpu", precision="fp16")
    (tmp_path / "in.en").write_text("a dog runs .\n")
    assert main(["translate", "--model", str(trained_model), "--src", "en", "--tgt", "de", "--device", "cpu",
                 "--precision", "fp16", "-i", str(tmp_path / "in.en")]) == 2
    assert "fp16 needs a CUDA GPU" in capsys.readouterr().err


def test_auto_times_the_models_own_decoding_where_bf16_is_native(trained_model, tmp_path, monkeypatch):
    monkeypatch.setenv("INTERLINGUA_CACHE_DIR", str(tmp_path))
    model = interlingua.load(trained_model, "cpu", precision="auto")
    if not cpu_has_native_bf16():
        assert model.runtime.precision == "fp32" and not (tmp_path / "precision.json").exists()
        return
    assert model.runtime.precision in ("fp32", "bf16")
    assert "decoding model" in (tmp_path / "precision.json").read_text()
    assert decoding_bf16_speedup(model._network, len(model.vocabs["en"]), steps=1) > 0
    (tmp_path / "in.en").write_text("a dog runs .\n")
    assert main(["translate", "--model", str(trained_model), "--src", "en", "--tgt", "de", "--device", "cpu",
                 "--precision", "auto", "-i", str(tmp_path / "in.en"), "-o", str(tmp_path / "out.de")]) == 0
    assert len((tmp_path / "out.de").read_text().splitlines()) == 1


def test_auto_works_for_a_transformer_model(tmp_path, monkeypatch):
    from test_attention_maps import transformer_checkpoint
    monkeypatch.setenv("INTERLINGUA_CACHE_DIR", str(tmp_path))
    model = interlingua.load(transformer_checkpoint(tmp_path / "model.pt"), "cpu", precision="auto")
    assert model.runtime.precision in ("fp32", "bf16")
    assert len(model.translate(["the dog"], "en", "de")) == 1
