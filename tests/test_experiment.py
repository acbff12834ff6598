"""The experiment runner and the shipped recipes."""
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import interlingua
from interlingua.config import load_config
from interlingua.errors import DataError
from interlingua.experiment import paper_setting, results_markdown, run_experiments, summary_markdown
from interlingua.precision import cpu_model

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
            assert yaml.safe_load(path.read_text()) == want, f"{path} is out of date: run python recipes/generate.py"
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
    assert f"CPU threads ({cpu_model()})" in text  # where it ran: the CPU model; a GPU run names its GPU
    on_gpu = {**runs[0], "compute": {**runs[0]["compute"], "device": "cuda", "machine": "NVIDIA H200"}}
    assert "8 steps, on NVIDIA H200;" in results_markdown([on_gpu])
    assert runs[0]["matrix"]["zero_shot"] == ["de-fr", "fr-de"]
    bleu = runs[0]["matrix"]["bleu"]
    cells = _table_cells(text, "## cpu_pivot_en")
    assert set(cells) == {(s, t) for s in ("de", "en", "fr") for t in ("de", "en", "fr")}
    for (s, t), cell in cells.items():
        if s == t:
            assert cell == "-"
            continue
        zero_shot = (s, t) in {("de", "fr"), ("fr", "de")}
        italic = cell.startswith("*") and cell.endswith("*")
        assert italic == zero_shot, (s, t, cell)  # italic exactly on the zero-shot de<->fr cells
        assert cell.strip("*").split(" ")[0] == f"{bleu[s][t]:.1f}", (s, t, cell)  # our number, then the paper's
    assert cells[("de", "en")].endswith("(39.4)")  # the paper's de->en number beside ours
    assert cells[("de", "fr")] == f"*{bleu['de']['fr']:.1f} (0.8)*"
    mean_zs = (bleu["de"]["fr"] + bleu["fr"]["de"]) / 2
    assert f"Mean zero-shot BLEU: {mean_zs:.2f}" in text
    assert f"| cpu_pivot_en | {mean_zs:.2f} |" in text  # the mean zero-shot summary
    # a finished recipe is not trained again
    run_dir = tmp_path / "run"
    files = [run_dir / "last.pt", run_dir / "best.pt", run_dir / "eval" / "experiment.json"]
    stamps = [f.stat().st_mtime_ns for f in files]
    again = run_experiments([recipe], [], out, max_test=20)  # cached: neither trained nor translated again
    assert again == runs and again[0]["compute"]["steps"] == 8
    assert [f.stat().st_mtime_ns for f in files] == stamps
    assert out.read_text() == text
    # every run's validations, as dev BLEU against dev loss, beside the table
    assert runs[0]["dev_curve"] and runs[0]["dev_curve"][-1][0] == 8
    assert (out.parent / "multi30k_dev_curves.png").stat().st_size > 0
    # last.pt scored on its own, beside the selected checkpoint's cached result; a missing file is named
    last = run_experiments([recipe], [], tmp_path / "results" / "last.md", max_test=20, checkpoint="last")
    assert last[0]["checkpoint"] == "last.pt" and (run_dir / "eval" / "experiment_last_beam1.json").is_file()
    assert [f.stat().st_mtime_ns for f in files] == stamps
    # scored without repeated n-grams: a result of its own, the selected checkpoint's cached one untouched
    blocked = run_experiments([recipe], [], tmp_path / "results" / "blocked.md", max_test=20, no_repeat_ngram=1)
    assert (run_dir / "eval" / "experiment_selected_beam1_norepeat1.json").is_file()
    assert blocked[0]["matrix"]["bleu"] != runs[0]["matrix"]["bleu"]
    assert [f.stat().st_mtime_ns for f in files] == stamps
    with pytest.raises(DataError, match="averaged.pt does not exist"):
        run_experiments([recipe], [], tmp_path / "results" / "averaged.md", max_test=20, checkpoint="averaged")


def test_the_cli_offers_the_runners_checkpoints():
    from test_cli_validation import _subparsers

    from interlingua.cli import build_parser
    from interlingua.experiment import CHECKPOINTS
    experiment = next(a for a in _subparsers(build_parser())["experiment"]._actions if a.dest == "checkpoint")
    assert tuple(experiment.choices) == CHECKPOINTS


def _table_cells(text: str, section: str) -> dict[tuple[str, str], str]:
    """{(source, target): cell} of the source x target table under a report section."""
    lines = text[text.index(section):].splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| src \\ tgt |"))
    targets = [c.strip() for c in lines[header].strip("|").split("|")][1:]
    cells = {}
    for line in lines[header + 2:]:
        if not line.startswith("| **"):
            break
        row = [c.strip() for c in line.strip().strip("|").split("|")]
        cells.update({(row[0].strip("*"), t): c for t, c in zip(targets, row[1:])})
    return cells


CPU_RECIPES = sorted((RECIPES / "multi30k" / "cpu").glob("*.yaml"))
PAPER_RECIPES = sorted((RECIPES / "multi30k" / "paper").glob("*.yaml"))


def family(name: str) -> str:
    """The generator's setting a recipe belongs to: its name without the language pair and the number of heads
    (`bilingual_de_en` and `bilingual_fr_cs` -> `bilingual_xx_yy`, `m2m_mono_k25` -> `m2m_mono_k`); a longer
    budget (`m2m_mono_long`) is the same setting, since the tests shrink every budget to a few steps."""
    name = re.sub(r"_(long|xlong)$", "", name)
    return re.sub(r"_k\d+", "_k", re.sub(r"_[a-z]{2}_[a-z]{2}(?=_|$)", "_xx_yy", name))


def one_per_family(recipes: list[Path]) -> list[Path]:
    """The first recipe (by name) of each family: `bilingual_en_de_k1` stands for k 1, 25 and 50."""
    chosen: dict[str, Path] = {}
    for path in recipes:
        chosen.setdefault(family(path.stem), path)
    return sorted(chosen.values())


def test_families_group_the_generated_recipes():
    assert family("bilingual_fr_cs") == family("bilingual_de_en") == "bilingual_xx_yy"
    assert family("bilingual_en_de_k50_nopenalty") == "bilingual_xx_yy_k_nopenalty"
    assert family("m2m_mono_without_cs_de") == "m2m_mono_without_xx_yy" and family("m2m_mono_xlong") == "m2m_mono"
    assert family("pivot_en_mono") == "pivot_en_mono" and family("ll_m2m") == "ll_m2m"
    cpu = [p.stem for p in one_per_family(CPU_RECIPES)]
    assert len(cpu) == 14 and "bilingual_en_de_k1" in cpu and "m2m_mono_long" not in cpu
    assert {family(p.stem) for p in PAPER_RECIPES} == {family(p) for p in cpu}  # the same settings at both scales


@pytest.mark.parametrize("recipe", CPU_RECIPES, ids=lambda p: p.stem)
def test_every_cpu_recipe_is_the_setting_its_name_says(recipe, multi30k_corpus):
    """Each shipped CPU recipe's directions, heads and penalty; one of each family trains below."""
    from interlingua.data.directions import build_directions
    cfg = load_config(recipe, [f"corpus={multi30k_corpus}"])
    trained, _, heads = _intended(recipe.stem)
    assert set(build_directions(cfg.directions, ["cs", "de", "en", "fr"])) == trained
    assert (None if cfg.model.bridge.type == "none" else cfg.model.bridge.heads) == heads
    assert cfg.model.shared == recipe.stem.startswith("ll_")
    assert cfg.train.penalty_weight == (0.0 if "nopenalty" in recipe.stem else 1.0)
    assert cfg.name == f"cpu_{recipe.stem}" and cfg.work_dir.name == recipe.stem


@pytest.fixture(scope="module")
def prepared_for_recipes():
    """The shrunk Multi30k prepared once per preprocessing setting (the recipes share two: per-language and joint
    vocabularies), as `train(cfg, data=...)` takes it."""
    return {}


@pytest.mark.parametrize("recipe", one_per_family(CPU_RECIPES), ids=lambda p: p.stem)
def test_one_cpu_recipe_of_each_family_trains_a_few_steps(recipe, multi30k_corpus, tmp_path, prepared_for_recipes):
    """A shipped CPU recipe runs as written; only the data and the budget are shrunk."""
    from interlingua.data.prepare import prepare
    from interlingua.training.trainer import train
    cfg = load_config(recipe, [f"corpus={multi30k_corpus}", f"work_dir={tmp_path}", "preprocess.vocab_size=300",
                               "preprocess.max_train_sentences=150", "preprocess.max_valid_sentences=4",
                               "train.max_steps=2", "train.valid_every=2", "train.batch_size=8",
                               "train.curves=false"])
    key = cfg.preprocess.model_dump_json()
    if key not in prepared_for_recipes:
        prepared_for_recipes[key] = prepare(cfg)
    result = train(cfg, data=prepared_for_recipes[key])
    assert result.steps == 2 and result.best_checkpoint is not None and result.best_checkpoint.exists()
    assert all(v.mean_bleu is not None and np.isfinite(v.mean_bleu) for v in result.history)
    trained, zero_shot, heads = _intended(recipe.stem)
    model = interlingua.load(result.best_checkpoint, "cpu")
    assert set(model.languages.trained) == trained
    assert model.heads == heads
    dev = result.history[-1].directions  # every direction with dev text is scored, zero-shot ones marked
    assert {name for name, r in dev.items() if r.zero_shot} == {f"{s}-{t}" for s, t in zero_shot}
    assert {name for name, r in dev.items() if not r.zero_shot} == {f"{s}-{t}" for s, t in trained if s != t}
    assert cfg.train.penalty_weight == (0.0 if "nopenalty" in recipe.stem else 1.0)


@pytest.mark.parametrize("recipe", PAPER_RECIPES, ids=lambda p: p.stem)
def test_every_paper_recipe_builds_its_model(recipe, multi30k_corpus):
    """Paper-scale recipes share the CPU code path; here their configs and model sizes are checked. The
    model is built on the meta device: every layer and shape, no memory and no initialisation."""
    from interlingua.data.directions import build_directions
    from interlingua.modules.model import TranslationNetwork
    cfg = load_config(recipe, [f"corpus={multi30k_corpus}"])
    directions = build_directions(cfg.directions, ["cs", "de", "en", "fr"])
    trained, _, heads = _intended(recipe.stem)
    assert set(directions) == trained
    with torch.device("meta"):
        model = TranslationNetwork(cfg.model, {lang: cfg.preprocess.vocab_size for lang in ["cs", "de", "en", "fr"]},
                                   [s for s, _ in directions], [t for _, t in directions])
    assert sum(p.numel() for p in model.parameters()) > 10_000_000
    assert (model.bridge.heads if model.has_bridge else None) == heads
    # the papers' sizes (000 Sec. 3.1): d_h 512 in 2 layers, d_w 1024, 10k subwords, SGD with lr 1.0
    assert cfg.model.encoder.hidden == 512 and cfg.model.encoder.layers == 2 and cfg.preprocess.vocab_size >= 10_000
    assert not model.has_bridge or tuple(model.bridge.w1.weight.shape) == (1024, 512)
    assert cfg.train.optimizer == "sgd" and cfg.train.lr == 1.0
    assert cfg.train.penalty_weight == (0.0 if "nopenalty" in recipe.stem else 1.0)


def _intended(name: str) -> tuple[set, set, int | None]:
    """What a recipe's name promises: (trained directions, zero-shot directions, bridge heads or None)."""
    langs = ["cs", "de", "en", "fr"]
    pairs = {(s, t) for s in langs for t in langs if s != t}
    heads = None if "nobridge" in name or name.startswith("ll_") else 10
    if match := re.search(r"_k(\d+)", name):
        heads = int(match.group(1))
    if match := re.fullmatch(r"bilingual(?:_nobridge)?_([a-z]{2})_([a-z]{2})(?:_.*)?", name):
        return {match.groups()}, set(), heads
    if name.startswith("pivot_en"):
        trained = {p for p in pairs if "en" in p}
    else:
        trained = set(pairs)
    if match := re.search(r"_without_([a-z]{2})_([a-z]{2})", name):
        a, b = match.groups()
        trained -= {(a, b), (b, a)}
    if "mono" in name:
        trained |= {(x, x) for x in langs}
    return trained, pairs - trained, heads


def _fake_run(recipe, setting, bleu, zero_shot=(), steps=500, directions=1):
    return {"recipe": recipe, "setting": setting, "matrix": {"bleu": bleu, "zero_shot": list(zero_shot)},
            "compute": {"steps": steps, "directions": directions}}


def test_summary_compares_multilingual_with_bilingual_and_zero_shot():
    runs = [_fake_run("bilingual_en_de", "bilingual", {"en": {"en": None, "de": 20.0}, "de": {"en": None, "de": None}}),
            _fake_run("m2m_mono", "m2m_mono", {"en": {"de": 23.5, "fr": 30.0}, "de": {"en": 25.0, "fr": 10.0},
                                               "fr": {"en": 28.0, "de": 12.0}}, ["de-fr", "fr-de"],
                      steps=8000, directions=16),
            _fake_run("twice_the_budget", "m2m_mono", {"en": {"de": 30.0}, "de": {"en": 31.0}},
                      steps=16000, directions=16)]
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
    assert all(r["compute"]["steps"] == 6 and r["compute"]["threads"] == 1 and r["compute"]["directions"] == 1
               for r in runs)
    text = out.read_text()
    assert text.index("## cpu_bilingual_en_de") < text.index("## cpu_bilingual_de_en")


def test_a_recipe_that_could_not_be_scored_stops_the_runner_before_any_training(tmp_path, multi30k_corpus, capsys):
    """A corpus without the test split the runner scores on, or a broken second recipe, used to surface only after
    the first recipes had trained (hours, at the studies' budgets): now before the first step."""
    from conftest import tiny_config, write_multiway_corpus

    from interlingua.cli import main
    no_test = write_multiway_corpus(tmp_path, "c", {"train": {"en": ["a dog"] * 20, "de": ["ein hund"] * 20},
                                                    "val": {"en": ["a dog"], "de": ["ein hund"]}})
    good, bad, broken = tmp_path / "good.yaml", tmp_path / "bad.yaml", tmp_path / "broken.yaml"
    good.write_text(yaml.safe_dump(tiny_config(multi30k_corpus, tmp_path / "good_run")))
    bad.write_text(yaml.safe_dump(tiny_config(no_test, tmp_path / "bad_run")))
    broken.write_text("model: [unclosed\n")
    for second, needle in ((bad, "has no split 'test_2016_flickr'"), (broken, "is not valid YAML")):
        code = main(["experiment", str(good), str(second), "--out", str(tmp_path / "table.md")])
        err = capsys.readouterr().err
        errors = [line for line in err.splitlines() if line.startswith("error")]
        assert code == 2 and len(errors) == 1 and needle in errors[0] and "Traceback" not in err, err
        assert not (tmp_path / "good_run").exists()  # nothing trained
    # a pivot that is no language of the corpus (a typo) would have left the pivot columns out after the training
    code = main(["experiment", str(good), "--pivot", "xx", "--out", str(tmp_path / "table.md")])
    assert code == 2 and "--pivot xx: not a language of" in capsys.readouterr().err
    assert not (tmp_path / "good_run").exists()
