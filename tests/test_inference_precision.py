"""Inference precision: fp32 by default, bf16 / auto on request, fp16 refused without a GPU."""
import json

import numpy as np
import pytest

import interlingua
from interlingua import precision
from interlingua.cli import main
from interlingua.errors import ConfigError
from interlingua.inference.decoding_probe import decoding_bf16_speedup
from interlingua.model_files.load import load_model

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


@pytest.mark.parametrize("native", [True, False], ids=["native-bf16", "no-bf16"])
def test_auto_times_the_models_own_decoding_only_where_bf16_is_native(trained_model, tmp_path, monkeypatch, native):
    """Both CPUs on any machine: the flags are stood in for (where the machine has no native bf16, the timed
    bf16 decoding is emulated, slower but the same code)."""
    monkeypatch.setenv("INTERLINGUA_CACHE_DIR", str(tmp_path))
    flags = "fpu avx2 avx512f avx512_bf16" if native else "fpu avx2 avx512f"
    monkeypatch.setattr(precision, "cpu_flags", lambda: precision.parse_cpu_flags(f"flags\t\t: {flags}\n"))
    model = interlingua.load(trained_model, "cpu", precision="auto")
    if not native:
        assert model.runtime.precision == "fp32" and not (tmp_path / "precision.json").exists()
        assert main(["translate", "--model", str(trained_model), "--src", "en", "--tgt", "de", "--device", "cpu",
                     "--precision", "auto", "-i", str(_one_line(tmp_path)), "-o", str(tmp_path / "out.de")]) == 0
        assert not (tmp_path / "precision.json").exists()  # nothing timed, nothing cached
        return
    assert model.runtime.precision in ("fp32", "bf16")
    cached = json.loads((tmp_path / "precision.json").read_text())
    assert len(cached) == 1 and "decoding model" in next(iter(cached)) and "avx512_bf16" in next(iter(cached))
    assert decoding_bf16_speedup(load_model(trained_model).network, len(model.vocabs["en"]), steps=1) > 0
    assert main(["translate", "--model", str(trained_model), "--src", "en", "--tgt", "de", "--device", "cpu",
                 "--precision", "auto", "-i", str(_one_line(tmp_path)), "-o", str(tmp_path / "out.de")]) == 0
    assert len((tmp_path / "out.de").read_text().splitlines()) == 1
    assert json.loads((tmp_path / "precision.json").read_text()) == cached  # the second load read the cache


def _one_line(folder):
    (folder / "in.en").write_text("a dog runs .\n")
    return folder / "in.en"


def test_auto_works_for_a_transformer_model(tmp_path, monkeypatch):
    from test_attention_maps import transformer_checkpoint
    monkeypatch.setenv("INTERLINGUA_CACHE_DIR", str(tmp_path))
    model = interlingua.load(transformer_checkpoint(tmp_path / "model.pt"), "cpu", precision="auto")
    assert model.runtime.precision in ("fp32", "bf16")
    assert len(model.translate(["the dog"], "en", "de")) == 1
