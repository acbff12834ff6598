"""`engine`: translation through CTranslate2 on the model's cached export (`load(..., engine=...)`,
`translate --engine`). Greedy output must be the native engine's token for token; the export is written
beside the model once and again when the weights change; a model CTranslate2 cannot run is one error
(`ctranslate2`) or stays native (`auto`); `auto` follows its measurement."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from test_export_ctranslate2 import sentences

import interlingua
from interlingua.cli import main
from interlingua.errors import ConfigError


@pytest.fixture()
def model_file(letter_code_transformer, tmp_path) -> Path:
    """The letter-code Transformer copied into a folder of this test's own (its export goes beside it)."""
    path = tmp_path / "model.pt"
    shutil.copy2(letter_code_transformer, path)
    return path


@pytest.mark.parametrize("src,tgt", [("xa", "xb"), ("xb", "xa")])
def test_greedy_output_is_the_native_engines(model_file, src, tgt):
    native = interlingua.load(model_file, "cpu")
    through = interlingua.load(model_file, "cpu", engine="ctranslate2")
    assert (native.engine, through.engine) == ("native", "ctranslate2")
    texts = sentences(src, 40, seed=11) + ["", sentences(src, 1, seed=2)[0] * 9]  # an empty and an over-long line
    for max_len in (None, 5):
        ours = native.translate(texts, src, tgt, max_len=max_len, batch_size=7)
        assert through.translate(texts, src, tgt, max_len=max_len, batch_size=7) == ours, max_len
    assert len(set(ours)) > 20 and ours[-2] == ""
    blocked = native.translate(texts, src, tgt, batch_size=7, no_repeat_ngram=1)  # CTranslate2's no_repeat_ngram_size
    assert through.translate(texts, src, tgt, batch_size=7, no_repeat_ngram=1) == blocked != ours
    assert through.translate(texts[:5], src, tgt, beam=4) and (model_file.parent / "model.ctranslate2").is_dir()
    # sentence vectors stay the native network's
    assert (through.encode(texts[:3], src) == native.encode(texts[:3], src)).all()


def test_the_export_is_reused_and_redone_when_the_weights_change(model_file):
    interlingua.load(model_file, "cpu", engine="ctranslate2")
    record = model_file.parent / "model.ctranslate2" / "interlingua.json"
    first = json.loads(record.read_text())
    written = (record.parent / "model.bin").stat().st_mtime_ns
    interlingua.load(model_file, "cpu", engine="ctranslate2")
    assert (record.parent / "model.bin").stat().st_mtime_ns == written  # the same weights: not exported again
    record.write_text(json.dumps({**first, "weights_sha256": "0" * 64}))  # as if the model file had changed
    interlingua.load(model_file, "cpu", engine="ctranslate2")
    assert json.loads(record.read_text())["weights_sha256"] == first["weights_sha256"]
    assert len(first["weights_sha256"]) == 64


def test_the_command_line_gives_the_same_lines(model_file, tmp_path, capsys):
    src = tmp_path / "in.xa"
    src.write_text("\n".join(sentences("xa", 12, seed=4)) + "\n")
    outputs = {}
    for engine in ("native", "ctranslate2"):
        assert main(["translate", "--model", str(model_file), "--src", "xa", "--tgt", "xb", "--beam", "1",
                     "--device", "cpu", "--engine", engine, "-i", str(src)]) == 0
        outputs[engine] = capsys.readouterr().out
    assert outputs["native"] == outputs["ctranslate2"] and outputs["native"].count("\n") == 12


def test_a_model_ctranslate2_cannot_run_is_one_error_or_stays_native(trained_model, tmp_path, capsys):
    with pytest.raises(ConfigError, match="engine ctranslate2: CTranslate2 cannot compute"):
        interlingua.load(trained_model, "cpu", engine="ctranslate2")
    assert main(["translate", "--model", str(trained_model), "--src", "en", "--tgt", "de", "--device", "cpu",
                 "--engine", "ctranslate2", "-i", os.devnull]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: engine ctranslate2: CTranslate2 cannot compute") and "Traceback" not in err
    assert interlingua.load(trained_model, "cpu", engine="auto").engine == "native"
    with pytest.raises(ValueError, match="engine"):
        interlingua.load(trained_model, "cpu", engine="fast")


def test_auto_follows_its_measurement(model_file, tmp_path, monkeypatch):
    monkeypatch.setenv("INTERLINGUA_CACHE_DIR", str(tmp_path / "cache"))
    chosen = interlingua.load(model_file, "cpu", engine="auto").engine
    cache = json.loads((tmp_path / "cache" / "precision.json").read_text())
    (speedup,) = [entry["speedup"] for key, entry in cache.items() if "engine ctranslate2 float32" in key]
    assert chosen == ("ctranslate2" if speedup >= 1.05 else "native"), speedup
    assert interlingua.load(model_file, "cpu", engine="auto").engine == chosen  # read from the cache
