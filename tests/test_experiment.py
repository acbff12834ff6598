"""The experiment runner and the shipped recipes."""
from pathlib import Path

import pytest
import yaml

from interlingua.config import load_config
from interlingua.experiment import paper_setting, results_markdown, run_experiments

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


def test_paper_setting_names():
    assert paper_setting("cpu_bilingual_en_de") == "bilingual"
    assert paper_setting("paper_bilingual_nobridge_de_en") == "bilingual_nobridge"
    assert paper_setting("cpu_pivot_en_mono") == "pivot_en_mono"
    assert paper_setting("cpu_m2m_mono_k25") is None


def test_every_generated_recipe_is_valid_and_current():
    import importlib.util
    spec = importlib.util.spec_from_file_location("gen", RECIPES / "generate.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    for scale in ("cpu", "paper"):
        expected = gen.all_recipes(scale)
        files = {p.stem: p for p in (RECIPES / "multi30k" / scale).glob("*.yaml")}
        assert set(files) == set(expected), "run python recipes/generate.py"
        for name, path in files.items():
            cfg = load_config(path)
            want = dict(expected[name])
            want.pop("_comment")
            assert yaml.safe_load(path.read_text())["name"] == want["name"]
            assert cfg.name == f"{scale}_{name}"


def test_runner_trains_evaluates_and_writes_paper_table(multi30k_corpus, tmp_path):
    recipe = tmp_path / "cpu_pivot_en.yaml"
    recipe.write_text(yaml.safe_dump({
        "name": "cpu_pivot_en", "corpus": str(multi30k_corpus), "work_dir": str(tmp_path / "run"),
        "preprocess": {"vocab_size": 300, "max_train_sentences": 100, "max_valid_sentences": 20, "max_len": 30},
        "directions": {"mode": "pivot", "pivot": "en", "languages": ["de", "en", "fr"]},
        "model": {"embed_dim": 32, "encoder": {"hidden": 32, "layers": 1}, "bridge": {"heads": 2, "hidden": 16},
                  "decoder": {"hidden": 32, "layers": 1}},
        "train": {"max_steps": 8, "valid_every": 8, "batch_size": 10}}))
    out = tmp_path / "results" / "multi30k.md"
    runs = run_experiments([recipe], [], out, max_test=20)
    text = out.read_text()
    assert "## cpu_pivot_en" in text and "8 steps" in text
    assert "(39.4)" in text  # the paper's de->en number beside ours
    assert "*" in text and "Mean zero-shot BLEU" in text  # de<->fr cells are zero-shot
    assert runs[0]["matrix"]["zero_shot"] == ["de-fr", "fr-de"]
    # a finished recipe is not trained again
    again = run_experiments([recipe], [], out, max_test=20)
    assert again[0]["compute"]["steps"] == 8
    assert results_markdown(again) == text
