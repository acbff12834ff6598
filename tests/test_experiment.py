"""The experiment runner and the shipped recipes."""
from pathlib import Path

import numpy as np
import pytest
import yaml

from interlingua.config import load_config
from interlingua.experiment import paper_setting, run_experiments, summary_markdown

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


def test_paper_setting_names():
    assert paper_setting("cpu_bilingual_en_de") == "bilingual"
    assert paper_setting("paper_bilingual_nobridge_de_en") == "bilingual_nobridge"
    assert paper_setting("cpu_pivot_en_mono") == "pivot_en_mono"
    assert paper_setting("cpu_m2m_mono_long") == "m2m_mono"  # same model, larger budget
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
    again = run_experiments([recipe], [], out, max_test=20)  # cached: neither trained nor translated again
    assert again[0]["compute"]["steps"] == 8
    assert out.read_text() == text
    assert "| cpu_pivot_en |" in text  # the mean zero-shot summary


CPU_RECIPES = sorted((RECIPES / "multi30k" / "cpu").glob("*.yaml"))
PAPER_RECIPES = sorted((RECIPES / "multi30k" / "paper").glob("*.yaml"))


@pytest.mark.parametrize("recipe", CPU_RECIPES, ids=lambda p: p.stem)
def test_every_cpu_recipe_trains_a_few_steps(recipe, multi30k_corpus, tmp_path):
    """Each shipped CPU recipe runs as written; only the data and the budget are shrunk."""
    from interlingua.training.trainer import Trainer
    cfg = load_config(recipe, [f"corpus={multi30k_corpus}", f"work_dir={tmp_path}", "preprocess.vocab_size=300",
                               "preprocess.max_train_sentences=150", "preprocess.max_valid_sentences=4",
                               "train.max_steps=2", "train.valid_every=2", "train.batch_size=8"])
    result = Trainer(cfg).train()
    assert result.steps == 2 and result.best_checkpoint is not None and result.best_checkpoint.exists()
    assert all(np.isfinite(r["mean_bleu"]) for r in result.history)


@pytest.mark.parametrize("recipe", PAPER_RECIPES, ids=lambda p: p.stem)
def test_every_paper_recipe_builds_its_model(recipe, multi30k_corpus, tmp_path):
    """Paper-scale recipes share the CPU code path; here their configs and model sizes are checked."""
    from interlingua.data.directions import build_directions
    from interlingua.modules.model import TranslationModel
    cfg = load_config(recipe, [f"corpus={multi30k_corpus}"])
    directions = build_directions(cfg.directions, ["cs", "de", "en", "fr"])
    assert directions
    model = TranslationModel(cfg.model, {lang: cfg.preprocess.vocab_size for lang in ["cs", "de", "en", "fr"]},
                             [s for s, _ in directions], [t for _, t in directions])
    assert sum(p.numel() for p in model.parameters()) > 10_000_000


def _fake_run(recipe, setting, bleu, zero_shot=(), steps=500, directions=1):
    return {"recipe": recipe, "setting": setting, "matrix": {"bleu": bleu, "zero_shot": list(zero_shot)},
            "compute": {"steps": steps, "directions": directions}}


def test_summary_compares_multilingual_with_bilingual_and_zero_shot():
    runs = [_fake_run("bilingual_en_de", "bilingual", {"en": {"en": None, "de": 20.0}, "de": {"en": None, "de": None}}),
            _fake_run("m2m_mono", "m2m_mono", {"en": {"de": 23.5, "fr": 30.0}, "de": {"en": 25.0, "fr": 10.0},
                                               "fr": {"en": 28.0, "de": 12.0}}, ["de-fr", "fr-de"], steps=8000, directions=16),
            _fake_run("twice_the_budget", "m2m_mono", {"en": {"de": 30.0}, "de": {"en": 31.0}}, steps=16000, directions=16)]
    text = "\n".join(summary_markdown(runs))
    assert "twice_the_budget" not in text  # more steps per direction: not an equal-steps comparison
    assert "| en->de | 20.0 | 23.5 (+3.5) |" in text
    assert "| m2m_mono | 11.00 |" in text


def test_runner_runs_recipes_in_parallel_processes(multi30k_corpus, tmp_path):
    recipes = []
    for name, pair in (("cpu_bilingual_en_de", ["en", "de"]), ("cpu_bilingual_de_en", ["de", "en"])):
        recipe = tmp_path / f"{name}.yaml"
        recipe.write_text(yaml.safe_dump({
            "name": name, "corpus": str(multi30k_corpus), "work_dir": str(tmp_path / name),
            "preprocess": {"vocab_size": 300, "max_train_sentences": 100, "max_valid_sentences": 10, "max_len": 30},
            "directions": {"mode": "bilingual", "pairs": [pair]},
            "model": {"embed_dim": 32, "encoder": {"hidden": 32, "layers": 1}, "bridge": {"heads": 2, "hidden": 16},
                      "decoder": {"hidden": 32, "layers": 1}},
            "train": {"max_steps": 6, "valid_every": 6, "batch_size": 10}}))
        recipes.append(recipe)
    out = tmp_path / "res.md"
    runs = run_experiments(recipes, [], out, max_test=10, jobs=2)
    assert [r["recipe"] for r in runs] == ["cpu_bilingual_en_de", "cpu_bilingual_de_en"]
    assert all(r["compute"]["steps"] == 6 and r["compute"]["threads"] == 1 and r["compute"]["directions"] == 1 for r in runs)
    text = out.read_text()
    assert text.index("## cpu_bilingual_en_de") < text.index("## cpu_bilingual_de_en")
