"""Synthetic pairs made online (`train.synthetic`): what is made, from which side, for which directions;
exact resume; and a tiny task where they raise zero-shot quality."""
from __future__ import annotations

import json
import random
import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch
from conftest import tiny_config, write_multiway_corpus
from test_resume import _call_hook, _ctrl_c_instead

from interlingua import load
from interlingua.cli import main
from interlingua.config import parse_config
from interlingua.data.corpus import load_corpus, read_group
from interlingua.data.prepare import prepare
from interlingua.data.vocab import BOS, EOS, PAD
from interlingua.errors import ConfigError
from interlingua.model_files.checkpoint import read_checkpoint
from interlingua.training.build import build_run
from interlingua.training.step import step_parts
from interlingua.training.synthetic import SyntheticPairs
from interlingua.training.trainer import Trainer, train

ENGLISH_CENTRED = {"mode": "pivot", "languages": ["de", "en", "fr"], "pivot": "en"}


def _config(corpus, work, synthetic, **train_options):
    return parse_config(tiny_config(corpus, work, directions=ENGLISH_CENTRED,
                                    train={"max_steps": 12, "valid_every": 6, "log_every": 3, "batch_size": 12,
                                           "synthetic": synthetic, **train_options}))


@pytest.fixture(scope="module")
def prepared(multi30k_corpus, tmp_path_factory):
    cfg = _config(multi30k_corpus, tmp_path_factory.mktemp("syn_prep"), {})
    return prepare(cfg)


def _made(run, steps=7):
    """The synthetic passes of the run's next `steps` steps, with the step parts they came from."""
    maker = SyntheticPairs(run)
    out = []
    for step in range(steps):
        parts = step_parts(run)
        jobs = maker.plan(parts, step)
        if jobs:
            micro, stats = maker.make(parts, jobs, step)
            out.append((parts, jobs, micro, stats))
    return out


def _cipher_corpus(root):
    """A multi-way task the test builds: each line is one sequence of 12 "words" spelt per language (e3 /
    d3 / f3), so every translation is word for word, and exact match measures it."""
    rng = random.Random(0)

    def lines(n):
        out = {"en": [], "de": [], "fr": []}
        for _ in range(n):
            words = [rng.randrange(12) for _ in range(rng.randint(2, 4))]
            for lang in out:
                out[lang].append(" ".join(f"{lang[0]}{w}" for w in words))
        return out
    return write_multiway_corpus(root, "cipher", {"train": lines(300), "val": lines(20), "test": lines(50)})


def _cipher_config(corpus, work, synthetic, steps=400):
    return parse_config(tiny_config(corpus, work, directions=ENGLISH_CENTRED,
                                    preprocess={"vocab_size": 80, "max_train_sentences": None, "lowercase": False,
                                                "max_valid_sentences": 20},
                                    train={"max_steps": steps, "valid_every": steps, "log_every": 100,
                                           "batch_size": 50, "lr": 0.01, "synthetic": synthetic}))


CIPHER_PAIRS_FROM = 250
"""The step from which the tiny task's run with synthetic pairs makes them (of its 400)."""


@pytest.fixture(scope="module")
def cipher_model(tmp_path_factory):
    """The cipher task's English-centred model, 400 steps without synthetic pairs: it finishes the sentences
    it makes, and is the reference of the tiny task. Trained in two legs, to `CIPHER_PAIRS_FROM` and then
    resumed to 400 (what one run does: resume is exact), so that the run with pairs from that step starts
    from the first leg's folder (`at_250` beside the run) instead of training those steps again."""
    root = tmp_path_factory.mktemp("cipher")
    corpus = _cipher_corpus(root)
    train(_cipher_config(corpus, root / "run", {}, steps=CIPHER_PAIRS_FROM))
    shutil.copytree(root / "run", root / f"at_{CIPHER_PAIRS_FROM}")
    return corpus, train(_cipher_config(corpus, root / "run", {}), resume=True).last_checkpoint


@pytest.mark.parametrize("decoding", ["greedy", "beam"])
def test_pivot_mode_translates_the_pivot_side_into_the_zero_shot_target(cipher_model, tmp_path, decoding):
    corpus, checkpoint = cipher_model
    run = build_run(_cipher_config(corpus, tmp_path, {"modes": ["pivot"], "rate": 1.0, "decoding": decoding}),
                    init=checkpoint)
    try:
        made = _made(run)
        assert made, "rate 1 gives every batch with an English side a synthetic batch"
        for parts, jobs, micro, stats in made:
            for mb in micro:
                b = mb.batch
                assert mb.synthetic and (b.src_lang, b.tgt_lang) in {("de", "fr"), ("fr", "de")}
                assert not mb.agreement  # made pairs are not pulled together unless asked for
                # the made side is in the made language's vocabulary, ends with EOS, no BOS or padding inside
                vocab = run.data.vocabs[b.tgt_lang]
                real = b.tgt_out != PAD
                assert int(b.tgt_out[real].max()) < len(vocab)
                assert not (b.tgt_out[real][:-1] == BOS).any()
            # the kept side is the real non-English side of the part, never the English one
            for job in jobs:
                (s, t), idx = parts[job.part]
                assert "en" in (s, t) and job.made_lang not in (s, t)
                kept_lang = t if s == "en" else s
                side = run.batches[(s, t)].tgt if s == "en" else run.batches[(s, t)].src
                kept = {tuple(side[i].tolist()) for i in idx}
                for mb in micro:
                    b = mb.batch
                    if kept_lang in (b.src_lang, b.tgt_lang) and not b.filler:
                        ids = b.src if b.src_lang == kept_lang else b.tgt_out
                        for row in ids.tolist():
                            row = [x for x in row if x not in (PAD, EOS)]
                            assert tuple(row) in kept or not row
            assert set(stats.pairs) <= {"de->fr", "fr->de"} and sum(stats.pairs.values()) > 0
            assert stats.unfinished < sum(stats.pairs.values())  # a model that learned ends its sentences
        # making pairs leaves no gradient behind and the model in training mode
        assert all(p.grad is None for p in run.network.parameters())
        assert run.network.training
    finally:
        run.close()


def test_made_sentences_repeat_no_ngram_when_asked(cipher_model, tmp_path):
    """`no_repeat_ngram: 1`: no subword twice in any made sentence (the cipher's sentences repeat words, so
    without it some made sentence does)."""
    corpus, checkpoint = cipher_model

    def made_sides(no_repeat_ngram):
        run = build_run(_cipher_config(corpus, tmp_path / str(no_repeat_ngram),
                                       {"modes": ["pivot"], "rate": 1.0, "reverse": False,
                                        "no_repeat_ngram": no_repeat_ngram}),
                        init=checkpoint)
        try:
            sides = []
            for _, _, micro, _ in _made(run, steps=4):
                for mb in micro:  # x -> y' only (no reverse pairs): the made side is each target
                    assert mb.synthetic
                    sides += [[x for x in row if x not in (PAD, EOS)] for row in mb.batch.tgt_out.tolist()]
            return sides
        finally:
            run.close()

    def repeats(rows):
        return sum(len(row) != len(set(row)) for row in rows)

    assert repeats(made_sides(0)) > 0
    blocked = made_sides(1)
    assert blocked and repeats(blocked) == 0


def test_directions_with_real_data_get_pairs_only_when_named(multi30k_corpus, prepared, tmp_path):
    default = build_run(_config(multi30k_corpus, tmp_path / "a", {"modes": ["backtranslation"], "rate": 1.0}),
                        data=prepared)
    try:
        for _, _, micro, _ in _made(default):
            assert {(mb.batch.src_lang, mb.batch.tgt_lang) for mb in micro} <= {("de", "fr"), ("fr", "de")}
    finally:
        default.close()
    named = build_run(_config(multi30k_corpus, tmp_path / "b", {"modes": ["backtranslation"], "rate": 1.0,
                                                                "directions": [["fr", "en"]]}), data=prepared)
    try:
        made = _made(named, steps=12)
        directions = {(mb.batch.src_lang, mb.batch.tgt_lang) for _, _, micro, _ in made for mb in micro}
        assert directions == {("fr", "en")}  # back-translation: the English side of de->en made into French
    finally:
        named.close()


def test_sampled_making_and_the_language_filter_run(multi30k_corpus, prepared, tmp_path):
    run = build_run(_config(multi30k_corpus, tmp_path, {"modes": ["pivot"], "rate": 1.0, "decoding": "sample",
                                                        "language_filter": True}), data=prepared)
    try:
        made = _made(run, steps=4)
        assert made and all(stats.checked >= stats.off_target for *_, stats in made)
    finally:
        run.close()


def test_a_synthetic_run_resumes_exactly(multi30k_corpus, prepared, tmp_path):
    """Also: with `selection: with_made` the dev means that select are taken over the supervised directions
    and the made pairs' directions together."""
    synthetic = {"modes": ["pivot", "backtranslation"], "rate": 0.7, "start_step": 3, "decoding": "sample",
                 "distill": True, "selection": "with_made"}
    straight = _config(multi30k_corpus, tmp_path / "straight", synthetic)
    train(straight, data=prepared)
    stopped = _config(multi30k_corpus, tmp_path / "stopped", synthetic)
    trainer = Trainer(build_run(stopped, data=prepared))
    calls = _call_hook(trainer.run.network, "run_encoder", 25, _ctrl_c_instead)  # inside a step's making
    with pytest.raises(KeyboardInterrupt, match="saved"):
        trainer.train()
    assert calls["n"] == 25
    train(stopped, resume=True, data=prepared)
    a = read_checkpoint(tmp_path / "straight" / "last.pt")["model"]
    b = read_checkpoint(tmp_path / "stopped" / "last.pt")["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)

    def logged(work):
        return [{k: v for k, v in json.loads(line).items() if k not in ("elapsed_s", "tokens_per_s",
                                                                        "synthetic_time_share")}
                for line in (work / "metrics.jsonl").read_text().splitlines()]
    reference = logged(tmp_path / "straight")
    assert reference == logged(tmp_path / "stopped")
    assert any("synthetic_pairs" in r for r in reference)
    assert all(r["synthetic_loss_weight"] > 0 for r in reference if "synthetic_pairs" in r)
    valid = [r for r in reference if r["type"] == "valid"][-1]
    assert valid["directions"]["de-fr"]["zero_resource"] and not valid["directions"]["de-en"]["zero_resource"]
    counted = [d for d in valid["directions"].values() if not d["zero_shot"] or d["zero_resource"]]
    assert len(counted) > len([d for d in counted if not d["zero_shot"]])
    for mean, key in (("mean_bleu", "bleu"), ("mean_loss", "loss")):
        assert valid[mean] == pytest.approx(sum(d[key] for d in counted) / len(counted))
    languages = load(tmp_path / "straight" / "last.pt").languages
    assert languages.zero_resource == (("de", "fr"), ("fr", "de")) and set(languages.zero_resource) <= set(
        languages.zero_shot)


def test_unknown_pivot_or_directions_are_refused(multi30k_corpus, prepared, tmp_path):
    with pytest.raises(ConfigError, match="train.synthetic.pivot"):
        build_run(_config(multi30k_corpus, tmp_path / "a", {"modes": ["pivot"], "pivot": "cs"}), data=prepared)
    with pytest.raises(ConfigError, match="train.synthetic.directions"):
        build_run(_config(multi30k_corpus, tmp_path / "b", {"modes": ["pivot"], "directions": [["de", "xx"]]}),
                  data=prepared)


def test_synthetic_pairs_raise_zero_shot_accuracy_on_a_tiny_task(cipher_model, tmp_path):
    """English-centred (en<->de, en<->fr, never a de-fr pair), 400 steps, with and without pivot-based
    pairs from step 250 on (the run with them resumed from the control's step 250): de->fr, exactly right in
    none of the test lines without them, is right in many with them (0.24-0.26 measured; the supervised
    en->fr of both runs about 0.3-0.4)."""
    corpus, without_pairs = cipher_model
    source = (corpus.parent / "test.de").read_text(encoding="utf-8").splitlines()
    reference = (corpus.parent / "test.fr").read_text(encoding="utf-8").splitlines()

    def zero_shot_accuracy(checkpoint):
        hyps = load(checkpoint).translate(source, "de", "fr")
        return sum(h.strip() == r for h, r in zip(hyps, reference)) / len(reference)
    shutil.copytree(without_pairs.parent.parent / f"at_{CIPHER_PAIRS_FROM}", tmp_path / "with")
    with_pairs = train(_cipher_config(corpus, tmp_path / "with", {"modes": ["pivot"], "rate": 1.0,
                                                                  "start_step": CIPHER_PAIRS_FROM}),
                       resume=True).last_checkpoint
    with_accuracy, without_accuracy = zero_shot_accuracy(with_pairs), zero_shot_accuracy(without_pairs)
    print(f"de->fr exact: {with_accuracy:.2f} with made pairs, {without_accuracy:.2f} without")
    assert with_accuracy >= without_accuracy + 0.12


def test_a_control_resumed_with_made_pairs_selects_on_one_scale(cipher_model, tmp_path):
    """The control (selected on its 4 trained directions) resumed with made pairs and `selection: with_made`
    (6 directions): its stored validations are scored again on the new scale, so best.pt and the best dev mean
    are the best, counted alike, of the control's best.pt and the validations after it; before, the control's
    4-direction mean outscored every 6-direction one and best.pt stayed the control for good."""
    corpus, control = cipher_model
    work = tmp_path / "run"
    shutil.copytree(control.parent, work)
    stored_best = read_checkpoint(work / "best.pt")["training"]["step"]  # the control's, on its own scale
    cfg = parse_config(tiny_config(corpus, work, directions=ENGLISH_CENTRED,
                                   preprocess={"vocab_size": 80, "max_train_sentences": None, "lowercase": False,
                                               "max_valid_sentences": 20},
                                   train={"max_steps": 420, "valid_every": 10, "log_every": 10, "batch_size": 50,
                                          "lr": 0.01, "synthetic": {"modes": ["pivot"], "rate": 1.0,
                                                                    "selection": "with_made"}}))
    result = train(cfg, resume=True)
    made = {"de-fr", "fr-de"}
    validations = [json.loads(line) for line in (work / "metrics.jsonl").read_text().splitlines()
                   if json.loads(line)["type"] == "valid"]
    assert [v["step"] for v in validations] == [CIPHER_PAIRS_FROM, 400, 410, 420]
    on_one_scale = {v["step"]: float(np.mean([s["bleu"] for name, s in v["directions"].items()
                                              if not s["zero_shot"] or name in made])) for v in validations}
    best_step = max([stored_best, 410, 420], key=lambda step: (on_one_scale[step], -step))
    control_best = next(v for v in validations if v["step"] == stored_best)
    assert control_best["mean_bleu"] > on_one_scale[stored_best]  # the control's own mean, over its 4 directions
    assert result.best_bleu == pytest.approx(on_one_scale[best_step])
    assert read_checkpoint(work / "best.pt")["training"]["step"] == best_step


def test_greedy_sampling_draws_from_the_distribution():
    """`greedy_search(sample=...)` draws tokens (a generator repeats them) where argmax would always agree."""
    from interlingua.modules.base import DecoderStateLike
    from interlingua.modules.search import greedy_search

    class Rows(DecoderStateLike):
        def __init__(self, n):
            self.n = n

        @property
        def batch_size(self):
            return self.n

        def select(self, index):
            return Rows(len(index))

    class Uniform:
        def step(self, prev, state):
            return torch.full((len(prev), 10), float(np.log(0.1))), state

    draws = [greedy_search(Uniform(), Rows(4), 6, sample=torch.Generator().manual_seed(s)) for s in (1, 1, 2)]
    assert draws[0] == draws[1] and draws[0] != draws[2]
    assert greedy_search(Uniform(), Rows(4), 3) == [[0, 0, 0]] * 4


@pytest.fixture(scope="module")
def english_centred_model(multi30k_corpus, tmp_path_factory):
    """A tiny en<->de, en<->fr model (de<->fr zero-shot), a few steps: enough to make pairs with."""
    work = tmp_path_factory.mktemp("english_centred")
    cfg = parse_config(tiny_config(multi30k_corpus, work, directions=ENGLISH_CENTRED,
                                   train={"max_steps": 20, "valid_every": 20, "batch_size": 12}))
    return train(cfg).last_checkpoint


def test_synthesize_writes_pairs_and_a_corpus_without_real_zero_resource_pairs(english_centred_model,
                                                                               multi30k_corpus, tmp_path, capsys):
    out = tmp_path / "made"
    assert main(["synthesize", str(english_centred_model), "--out", str(out), "--corpus", str(multi30k_corpus),
                 "--max-lines", "30", "--threads", "1"]) == 0
    printed = capsys.readouterr().out
    assert "de-fr 30 synthetic pairs" in printed and "fr-de 30 synthetic pairs" in printed
    corpus = load_corpus(out / "corpus.yaml")
    train_groups = corpus.groups("train")
    # no group gives de and fr together but the synthetic ones (Multi30k's lines are multi-way)
    together = [g.name for g in train_groups if {"de", "fr"} <= set(g.files)]
    assert sorted(together) == ["synthetic.de-fr", "synthetic.fr-de"]
    made = read_group(next(g for g in train_groups if g.name == "synthetic.de-fr"))
    real = read_group(corpus.groups("val")[0])  # the other splits are kept as they were
    assert len(made["de"]) == len(made["fr"]) == 30 and len(real["de"]) == len(real["fr"])
    original = read_group(load_corpus(multi30k_corpus).groups("train")[0], limit=30)
    assert made["de"] == [x for x in original["de"] if x.strip()][:30]  # the real side, as it was
    assert made["fr"] != original["fr"]  # the made side is the model's, never the real French
    # the YAML trains as it is: de->fr and fr->de from the synthetic pairs alone
    cfg = parse_config(tiny_config(out / "corpus.yaml", tmp_path / "run",
                                   directions={"mode": "many2many", "languages": ["de", "en", "fr"]},
                                   train={"max_steps": 2, "valid_every": 2}))
    assert train(cfg).steps == 2


def test_synthesize_refuses_what_it_cannot_make(english_centred_model, tmp_path, capsys):
    assert main(["synthesize", str(english_centred_model), "--out", str(tmp_path / "a"),
                 "--directions", "en-fr"]) == 2
    assert "through the pivot 'en'" in capsys.readouterr().err
    assert main(["synthesize", str(english_centred_model), "--out", str(tmp_path / "b"), "--pivot", "cs"]) == 2
    assert "pivot 'cs'" in capsys.readouterr().err
    # a corpus without French: refused before any sentence is translated (de->fr's pairs were made first, then
    # fr->de found no French), and no output folder is left behind
    from conftest import write_multiway_corpus
    no_french = write_multiway_corpus(tmp_path, "en-de", {"train": {"en": ["a dog ."] * 3, "de": ["ein hund ."] * 3}})
    assert main(["synthesize", str(english_centred_model), "--out", str(tmp_path / "c"),
                 "--corpus", str(no_french)]) == 2
    captured = capsys.readouterr()
    assert "has no file of fr beside one of en" in captured.err and "sent/s" not in captured.err, captured.err
    assert not (tmp_path / "c").exists()


def test_the_service_answers_zero_shot_and_pivot_side_by_side(english_centred_model):
    from fastapi.testclient import TestClient

    from interlingua.serving.app import build_app
    model = load(english_centred_model)
    texts = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee."]
    with TestClient(build_app(model)) as client:
        answer = client.post("/translate", json={"texts": texts, "src": "de", "tgt": "fr", "compare_pivot": True})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["direction"] == "zero-shot" and body["translations"] == model.translate(texts, "de", "fr")
        assert body["through_pivot"] == {"pivot": "en", "translations": model.translate(texts, "de", "fr", pivot="en")}
        supervised = client.post("/translate", json={"texts": texts, "src": "de", "tgt": "en",
                                                     "compare_pivot": True}).json()
        assert supervised["direction"] == "supervised" and supervised["through_pivot"] is None
        assert "through_pivot" not in client.post("/translate", json={"texts": texts, "src": "de", "tgt": "fr"}).json()
        refused = client.post("/translate", json={"texts": texts, "src": "de", "tgts": ["fr"], "compare_pivot": True})
        assert refused.status_code == 422 and refused.json()["error"]["field"] == "body.compare_pivot"


def test_without_forward_the_made_sentence_is_only_ever_a_source(multi30k_corpus, prepared, tmp_path):
    run = build_run(_config(multi30k_corpus, tmp_path, {"modes": ["pivot"], "rate": 1.0, "forward": False}),
                    data=prepared)
    try:
        made = _made(run)
        assert made
        for parts, jobs, micro, _ in made:
            for job in jobs:
                assert job.made_is_target == (False,)
            for mb in micro:  # the target side is the real German or French of the English pair
                (s, t), idx = next(parts[j.part] for j in jobs if mb.batch.tgt_lang in parts[j.part][0])
                side = run.batches[(s, t)].tgt if t == mb.batch.tgt_lang else run.batches[(s, t)].src
                real = {tuple(side[i].tolist()) for i in idx}
                for row in mb.batch.tgt_out.tolist():
                    assert tuple(x for x in row if x not in (PAD, EOS)) in real
    finally:
        run.close()


def test_a_tag_marks_every_made_source_and_no_real_one(cipher_model, tmp_path):
    """`tag`: each made source sentence starts with the BOS id (tagged back-translation), and is otherwise the
    one made without the tag; real source sentences never hold BOS."""
    corpus, checkpoint = cipher_model
    made = {}
    for tag in (False, True):
        run = build_run(_cipher_config(corpus, tmp_path / str(tag), {"modes": ["pivot"], "rate": 1.0,
                                                                     "forward": False, "tag": tag}), init=checkpoint)
        try:
            made[tag] = [mb.batch for _, _, micro, _ in _made(run, steps=3) for mb in micro if not mb.batch.filler]
            assert not any((BOS == row).any() for batches in run.batches.values() for row in batches.src)
        finally:
            run.close()
    assert made[True] and len(made[True]) == len(made[False])
    for plain, tagged in zip(made[False], made[True]):
        assert not (plain.src == BOS).any()
        assert (tagged.src[:, 0] == BOS).all() and torch.equal(tagged.src_lengths, plain.src_lengths + 1)
        assert torch.equal(tagged.src[:, 1:], plain.src) and torch.equal(tagged.tgt_out, plain.tgt_out)


@pytest.mark.parametrize("weighting", ["token", "batch"])
def test_made_pairs_weigh_what_the_weighting_says(cipher_model, tmp_path, weighting):
    """With `batch_tokens` a step holds a batch of every trained direction, and its real pairs weigh 1 in all:
    `token` gives a made target token the weight of a real one, `batch` gives each made batch the weight of
    the whole real step (so several made batches outweigh the real pairs several times)."""
    corpus, checkpoint = cipher_model
    cfg = _cipher_config(corpus, tmp_path, {"modes": ["pivot", "backtranslation"], "rate": 1.0,
                                            "weighting": weighting})
    cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"batch_size": None, "batch_tokens": 300})})
    run = build_run(cfg, init=checkpoint)
    try:
        made = _made(run, steps=3)
        assert made
        for parts, _, micro, stats in made:
            assert len(parts) == len(run.batches) > 1
            real = sum(run.batches[d].target_tokens(idx) for d, idx in parts)
            kept = [mb for mb in micro if not mb.batch.filler]
            assert kept and stats.weight == pytest.approx(sum(mb.scale for mb in micro))
            if weighting == "token":
                made_tokens = [float(mb.batch.tgt_out.ne(PAD).sum()) for mb in kept]
                assert [mb.scale for mb in kept] == pytest.approx([n / real for n in made_tokens])
                assert stats.weight == pytest.approx(sum(made_tokens) / real)
            else:
                assert [mb.scale for mb in kept] == pytest.approx([1.0] * len(kept))  # one pass per job and use
                assert stats.weight == pytest.approx(len(kept)) and stats.weight > 2
    finally:
        run.close()


def test_distilled_targets_are_the_teachers_distributions(cipher_model, tmp_path):
    """`distill`: a made target carries, at each of its positions, the distribution of the pivot direction
    that made it, teacher-forced on the made sentence. Greedy making took the argmax of that very
    distribution, so every made subword is its position's most probable one; the made sentence as a source
    (`reverse`) carries none. One-hot soft targets give the hard loss exactly."""
    corpus, checkpoint = cipher_model
    run = build_run(_cipher_config(corpus, tmp_path, {"modes": ["pivot"], "rate": 1.0, "distill": True}),
                    init=checkpoint)
    try:
        made = _made(run)
        distilled = [mb for _, _, micro, _ in made for mb in micro if mb.batch.soft_targets is not None]
        plain = [mb for _, _, micro, _ in made for mb in micro if mb.batch.soft_targets is None]
        assert distilled and plain  # forward pairs distilled, reverse pairs not
        for mb in distilled:
            b, soft = mb.batch, mb.batch.soft_targets
            gold = b.tgt_out[b.tgt_out != PAD]
            assert soft.shape[0] == len(gold) and torch.allclose(soft.sum(-1), torch.ones(len(gold)))
            if not b.filler:
                assert torch.equal(soft.argmax(-1), gold)
        b = next(mb.batch for mb in distilled if not mb.batch.filler)
        run.network.eval()
        one_hot = torch.nn.functional.one_hot(b.tgt_out[b.tgt_out != PAD], b.soft_targets.shape[1]).float()
        hard = run.network(replace(b, soft_targets=None)).loss
        assert float(run.network(replace(b, soft_targets=one_hot)).loss) == pytest.approx(float(hard), rel=1e-6)
        assert float(run.network(b).loss) != pytest.approx(float(hard), rel=1e-3)  # the teacher's are not one-hot
    finally:
        run.close()


def test_distillation_needs_forward_pivot_pairs():
    with pytest.raises(ConfigError, match="train.synthetic.distill"):
        parse_config(tiny_config("corpus.yaml", "work", train={"synthetic": {"modes": ["pivot"], "forward": False,
                                                                             "distill": True}}))
