"""Paper 004's setting end to end: decoder-side language tags, the n lowest-dev-loss checkpoints
averaged, off-target rates, and the zero-shot study table of `interlingua experiment`."""
import os
from pathlib import Path

import pytest
import torch
import yaml
from conftest import tiny_config

from interlingua.config import load_config, parse_config
from interlingua.data.directions import build_directions, pair_shares
from interlingua.data.language_id import identify, off_target_rate
from interlingua.data.vocab import BOS, language_tag
from interlingua.experiment import run_experiments
from interlingua.model_files.checkpoint import read_checkpoint
from interlingua.records import Validation
from interlingua.training.build import build_run
from interlingua.training.checkpoints import lowest_loss_steps
from interlingua.training.trainer import train

ZERO_SHOT_RECIPES = sorted(
    (Path(__file__).resolve().parents[1] / "recipes" / "multi30k" / "cpu" / "zero_shot").glob("*.yaml"))

TRANSFORMER = {"embed_dim": 32, "shared": True, "tag_position": "decoder_start", "bridge": {"type": "none"},
               "encoder": {"type": "transformer", "layers": 3, "heads": 2, "ff_dim": 64, "residual_drop_layer": 2},
               "decoder": {"type": "transformer", "layers": 1, "heads": 2, "ff_dim": 64, "tie_embeddings": True}}


def _zero_shot_config(corpus: Path, work: Path, **train) -> dict:
    return tiny_config(corpus, work, preprocess={"joint_vocab": True, "vocab_size": 500, "lowercase": False,
                                                 "max_train_sentences": 120, "max_valid_sentences": 12},
                       directions={"mode": "pivot", "pivot": "en", "languages": ["de", "en", "fr"]},
                       model=TRANSFORMER, train={"max_steps": 8, "valid_every": 2, "batch_size": 12, **train})


def test_decoder_start_tag_replaces_bos_and_leaves_the_source_unmarked(multi30k_corpus, tmp_path):
    run = build_run(parse_config(_zero_shot_config(multi30k_corpus, tmp_path)))
    vocab = run.data.vocabs["de"]
    for (_src, tgt), batches in run.batches.items():
        batch = batches.next()
        tag = vocab.piece_id(language_tag(tgt))
        assert tag > 3  # a piece of its own, not a special (pad, unk, bos, eos)
        assert (batch.tgt_in[:, 0] == tag).all()  # the target language is the decoder's first input
        tags = {vocab.piece_id(language_tag(x)) for x in ("de", "en", "fr")}
        assert not any(int(t) in tags for t in batch.src.flatten())  # nothing marks the source
    # the source-prefix placement (Johnson et al.) is still the default
    cfg = _zero_shot_config(multi30k_corpus, tmp_path / "prefix")
    cfg["model"] = {**TRANSFORMER, "tag_position": "source_prefix"}
    prefixed = build_run(parse_config(cfg))
    batch = prefixed.batches[("de", "en")].next()
    assert (batch.tgt_in[:, 0] == BOS).all()
    assert (batch.src[:, 0] == prefixed.data.vocabs["de"].piece_id(language_tag("en"))).all()


def test_pair_shares_split_the_lines_by_language_pair():
    directions = [("cs", "en"), ("de", "en"), ("en", "cs"), ("en", "de"), ("en", "en"), ("en", "fr"), ("fr", "en")]
    shares = pair_shares(directions, "disjoint")
    assert (shares[("cs", "en")] == shares[("en", "cs")] == (0, 3)
            and shares[("de", "en")] == shares[("en", "de")] == (1, 3))
    assert shares[("en", "fr")] == (2, 3) and ("en", "en") not in shares  # copies keep every line
    assert set(pair_shares(directions, "common").values()) == {(0, 3)} and pair_shares(directions, "all") == {}


def test_disjoint_directions_train_each_pair_on_its_own_lines(multi30k_corpus, tmp_path):
    def english_sides(pair_lines: str) -> dict[tuple[str, str], set[bytes]]:
        cfg = _zero_shot_config(multi30k_corpus, tmp_path / pair_lines)
        cfg["directions"]["pair_lines"] = pair_lines
        run = build_run(parse_config(cfg))
        return {d: {a.tobytes() for a in (b.tgt if d[1] == "en" else b.src)} for d, b in run.batches.items()}

    full, split, common = english_sides("all"), english_sides("disjoint"), english_sides("common")
    assert split[("de", "en")] == split[("en", "de")] and split[("fr", "en")] == split[("en", "fr")]
    assert not split[("de", "en")] & split[("fr", "en")]  # no English line in two pairs
    assert full[("de", "en")] == full[("fr", "en")]  # multi-way: the same English lines for every pair
    assert split[("de", "en")] | split[("fr", "en")] <= full[("de", "en")]
    assert 0.4 < len(split[("de", "en")]) / len(full[("de", "en")]) < 0.6
    assert common[("de", "en")] == common[("fr", "en")] == split[("de", "en")]  # the control: one share, multi-way


def test_lowest_loss_steps_ranks_by_mean_dev_loss():
    history = [Validation(step=s, mean_loss=loss)
               for s, loss in ((2, 3.0), (4, 2.0), (6, 2.5), (8, 2.0), (10, float("nan")))]
    assert lowest_loss_steps(history, 2) == [8, 4]  # ties: the later step first
    assert lowest_loss_steps(history, 9) == [8, 4, 6, 2]


def test_average_best_keeps_the_lowest_loss_checkpoints_and_averages_them(multi30k_corpus, tmp_path):
    result = train(parse_config(_zero_shot_config(multi30k_corpus, tmp_path, average_best=2)))
    kept = lowest_loss_steps(result.history, 2)
    assert len(result.history) == 4 and len(kept) == 2
    assert sorted(p.name for p in (tmp_path / "best_loss").glob("*.pt")) == sorted(f"step{s}.pt" for s in kept)
    averaged = read_checkpoint(tmp_path / "averaged.pt")
    kept_payloads = [read_checkpoint(tmp_path / "best_loss" / f"step{s}.pt") for s in kept]
    assert all("training" not in p for p in kept_payloads)  # weights only: no optimizer moments on disk
    parts = [p["model"] for p in kept_payloads]
    for name, value in averaged["model"].items():
        if value.is_floating_point():
            torch.testing.assert_close(value, (parts[0][name] + parts[1][name]) / 2)


def test_language_identifier_and_off_target_rate():
    langs = ["cs", "de", "en", "fr"]
    texts = ["Ein Mann fährt mit dem Fahrrad durch die Stadt.", "A man is riding a bicycle through the city.",
             "Un homme fait du vélo dans la ville.", "Muž jede na kole přes město.", ""]
    assert identify(texts, langs) == ["de", "en", "fr", "cs", None]
    assert off_target_rate(texts, "de", langs) == pytest.approx(80.0)  # the empty output counts as off-target
    assert off_target_rate(texts[:1], "de", langs) == 0.0


def test_the_identifier_is_unpacked_once_and_read_back_from_the_cache_folder(tmp_path):
    """langid's model is unpacked (seconds) by the first process and kept in the cache folder; later
    processes read it back unchanged; a damaged cache file is unpacked and written again; a cache folder
    that cannot be written changes nothing but the time."""
    import subprocess
    import sys
    code = ("from interlingua.data.language_id import identify; "
            "print(identify(['Ein Mann fährt Fahrrad.', 'A man rides a bike.', 'Un homme fait du vélo.'], "
            "['de', 'en', 'fr']))")

    def identified(cache: Path) -> str:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "INTERLINGUA_CACHE_DIR": str(cache)})
        assert done.returncode == 0 and not done.stderr, done.stderr[-2000:]
        return done.stdout.strip()

    cache = tmp_path / "cache"
    assert identified(cache) == "['de', 'en', 'fr']"
    [kept] = cache.glob("langid-*.npz")
    written = kept.stat().st_mtime_ns
    assert identified(cache) == "['de', 'en', 'fr']" and kept.stat().st_mtime_ns == written  # read, not rewritten
    kept.write_bytes(b"not an npz file")
    assert identified(cache) == "['de', 'en', 'fr']" and kept.stat().st_size > 2**20
    (tmp_path / "a-file").write_text("")
    assert identified(tmp_path / "a-file") == "['de', 'en', 'fr']"


def test_the_languages_supported_are_the_identifiers_own():
    from langid.langid import LanguageIdentifier, model

    from interlingua.data.language_id import LANGUAGES, supported
    assert LANGUAGES == set(LanguageIdentifier.from_modelstring(model).nb_classes)
    assert supported(["cs", "de", "en", "fr"]) and not supported(["de", "xa"]) and not supported(["xb"])


def test_experiment_writes_the_zero_shot_study_with_pivot_and_off_target(multi30k_corpus, tmp_path):
    recipe = tmp_path / "zs.yaml"
    recipe.write_text(yaml.safe_dump({**_zero_shot_config(multi30k_corpus, tmp_path / "run", average_best=2),
                                      "name": "zs_tiny"}))
    out = tmp_path / "zero-shot.md"
    run = run_experiments([recipe], [], out, max_test=15, pivot="en")[0]
    assert run["checkpoint"] == "averaged.pt"
    matrix, pivoted = run["matrix"], run["pivot_matrix"]
    assert sorted(matrix["zero_shot"]) == ["de-fr", "fr-de"]
    assert sorted(f"{s}-{t}" for s, row in pivoted["bleu"].items() for t in row) == ["de-fr", "fr-de"]
    for table in ("bleu_cased", "off_target"):
        values = [v for row in matrix[table].values() for v in row.values()]
        assert len(values) == 6 and all(0 <= v <= 100 for v in values)
    assert set(matrix["lid_ceiling"]) == {"de", "en", "fr"} and all(v > 50 for v in matrix["lid_ceiling"].values())
    text = out.read_text()
    assert "## Zero-shot study" in text
    row = next(line for line in text.splitlines() if line.startswith("| zs | averaged.pt |"))
    zs_cased = (matrix["bleu_cased"]["de"]["fr"] + matrix["bleu_cased"]["fr"]["de"]) / 2
    assert f"| {zs_cased:.1f} / " in row  # the zero-shot mean, cased first
    pivot_cased = (pivoted["bleu_cased"]["de"]["fr"] + pivoted["bleu_cased"]["fr"]["de"]) / 2
    assert f"| {pivot_cased:.1f} / " in row  # and the same directions through English
    tested = run["zero_shot_vs_pivot"]["directions"]  # each direction's paired bootstrap test, in the table too
    assert set(tested) == {"de-fr", "fr-de"} and all(0 < d["p_value"] <= 1 for d in tested.values())
    assert f"(pivot {pivoted['bleu_cased']['de']['fr']:.1f}, p {tested['de-fr']['p_value']:.2f})" in text


@pytest.mark.parametrize("recipe", ZERO_SHOT_RECIPES, ids=lambda p: p.stem)
def test_zero_shot_recipes_are_english_centred_and_name_their_switches(recipe, multi30k_corpus):
    cfg = load_config(recipe, [f"corpus={multi30k_corpus}"])
    langs = cfg.directions.languages or ["cs", "de", "en", "fr"]
    trained = set(build_directions(cfg.directions, langs))
    assert {d for d in trained if d[0] != d[1]} == ({(x, "en") for x in langs if x != "en"}
                                                    | {("en", x) for x in langs if x != "en"})
    if "lstm" in recipe.stem:
        assert cfg.model.encoder.type == "bilstm" and cfg.directions.monolingual
        return
    enc, dec = cfg.model.encoder, cfg.model.decoder
    assert cfg.model.shared and cfg.model.tag_position == "decoder_start" and cfg.model.bridge.type == "none"
    assert cfg.preprocess.joint_vocab and dec.tie_embeddings and cfg.train.label_smoothing == 0.1
    assert cfg.train.average_best in (3, 5) and cfg.train.lr_schedule == "inverse_sqrt"
    layer = int(recipe.stem.split("_layer")[1]) if "_layer" in recipe.stem else 3
    assert enc.residual_drop_layer == (layer if recipe.stem.startswith("residual") else None)
    assert enc.position_query == ("posq" in recipe.stem)
    assert enc.variational_dropout == dec.variational_dropout == ("_vd" in recipe.stem)


def test_dev_loss_starts_the_decoder_with_the_language_tag(multi30k_corpus, tmp_path):
    from interlingua.data.batching import make_batch
    from interlingua.training.validation import evaluate_devset
    run = build_run(parse_config(_zero_shot_config(multi30k_corpus, tmp_path)))
    dev, vocabs, model = run.devsets[("de", "en")], run.data.vocabs, run.network.eval()
    reported = evaluate_devset(model, dev, vocabs, batch_size=len(dev.src)).loss

    def loss(start: int) -> float:
        with torch.inference_mode():
            out = model(make_batch(dev.src, dev.tgt, "de", "en", None, start))
        return out.nll_sum / out.n_tokens

    assert reported == pytest.approx(loss(vocabs["en"].piece_id(language_tag("en"))), rel=1e-5)
    assert reported != pytest.approx(loss(BOS), rel=1e-5)


CONVERGED_RECIPES = sorted(
    (Path(__file__).resolve().parents[1] / "recipes" / "multi30k" / "cpu" / "zero_shot_converged").glob("*.yaml"))


@pytest.mark.parametrize("recipe", CONVERGED_RECIPES, ids=lambda p: p.stem)
def test_converged_recipes_use_the_authors_setup_and_differ_only_in_their_row(recipe, multi30k_corpus):
    cfg = load_config(recipe, [f"corpus={multi30k_corpus}"])
    base = load_config(recipe.with_name("baseline.yaml"), [f"corpus={multi30k_corpus}"])
    enc, dec, tc = cfg.model.encoder, cfg.model.decoder, cfg.train
    assert dec.language_embedding == "concat" and cfg.model.tag_position == "decoder_start"
    assert enc.attention_dropout == dec.attention_dropout == 0.2 and enc.word_dropout == dec.word_dropout == 0.1
    assert tc.adam_betas == (0.9, 0.98) and tc.batch_tokens and tc.patience and tc.max_minutes is None
    assert enc.residual_drop_layer == (3 if recipe.stem.startswith("residual") else None)
    assert enc.variational_dropout == dec.variational_dropout == ("_vd" in recipe.stem)
    assert enc.position_query == ("query" in recipe.stem)  # wavelength: the paper's 100, or the authors' code's 10
    assert enc.query_wavelength == (10.0 if recipe.stem.endswith("_w10") else 100.0)
    assert (tc.agreement.weight > 0) == ("agreement" in recipe.stem)
    assert (tc.seed != base.train.seed) == ("seed" in recipe.stem)
    assert cfg.work_dir.name == recipe.stem and cfg.name == f"zsc_{recipe.stem}"


def test_a_converged_recipe_with_every_new_option_trains(multi30k_corpus, tmp_path):
    """residual_agreement as written (token batches, language concat, both dropouts, betas, patience,
    agreement, the inverse-sqrt schedule, the average of the lowest-loss checkpoints), only the data and the
    budget shrunk."""
    import json
    recipe = CONVERGED_RECIPES[0].with_name("residual_agreement.yaml")
    cfg = load_config(recipe, [f"corpus={multi30k_corpus}", f"work_dir={tmp_path}", "preprocess.vocab_size=300",
                               "preprocess.max_train_sentences=150", "preprocess.max_valid_sentences=4",
                               "train.max_steps=4", "train.valid_every=2", "train.batch_tokens=1200",
                               "train.warmup_steps=2", "train.log_every=2", "train.curves=false"])
    result = train(cfg)
    assert result.steps == 4 and [v.step for v in result.history] == [2, 4]
    assert result.history[1].mean_loss < result.history[0].mean_loss  # it learns
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in logged if r["type"] == "train"]
    assert [r["step"] for r in trained] == [2, 4] and all(r["agreement"] > 0 for r in trained)  # the term is on
    assert [r["lr"] for r in trained] == pytest.approx([0.002, 0.002 * (2 / 4) ** 0.5])  # peak, then 1/sqrt(step)
    assert sorted(p.name for p in (tmp_path / "best_loss").glob("*.pt")) == ["step2.pt", "step4.pt"]
    assert (tmp_path / "averaged.pt").is_file()


GPU_RECIPES = sorted(
    (Path(__file__).resolve().parents[1] / "recipes" / "multi30k" / "gpu" / "zero_shot_converged").glob("*.yaml"))
PAPER_SIZE = {"model.embed_dim": 512, "model.encoder.layers": 5, "model.encoder.heads": 8, "model.encoder.ff_dim": 2048,
              "model.decoder.layers": 5, "model.decoder.heads": 8, "model.decoder.ff_dim": 2048,
              "train.warmup_steps": 8000, "train.batch_tokens": 24576, "train.precision": "bf16",
              "train.device": "cuda"}


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        out.update(_flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return out


@pytest.mark.parametrize("recipe", GPU_RECIPES, ids=lambda p: p.stem)
def test_gpu_recipes_are_the_cpu_ones_at_the_papers_size(recipe, multi30k_corpus):
    """Only the size, the schedule that goes with it, the precision, the device and the names differ."""
    gpu = load_config(recipe, [f"corpus={multi30k_corpus}"])
    cpu = load_config(CONVERGED_RECIPES[0].with_name(recipe.name), [f"corpus={multi30k_corpus}"])
    a, b = _flat(gpu.model_dump(mode="json")), _flat(cpu.model_dump(mode="json"))
    differ = {k for k in a if a[k] != b.get(k)}
    expected = {k for k, v in PAPER_SIZE.items() if b.get(k) != v}
    assert {k: a[k] for k in PAPER_SIZE} == PAPER_SIZE
    schedule = {"train.lr", "train.max_steps", "train.valid_every", "train.threads"}
    assert differ - expected <= {"name", "work_dir", *schedule}
    assert gpu.work_dir.name == recipe.stem and gpu.name == f"zsg_{recipe.stem}"
