"""Per-layer encoder analyses: layer states of every encoder kind, SVCCA, the linear probes,
language identification, and `interlingua analyze encoder` end to end on tiny trained models."""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_config, write_multiway_corpus

from interlingua.cli import main
from interlingua.config import ModelConfig, parse_config
from interlingua.evaluation.encoder_analysis import (
    keyed_retrieval_share,
    language_id,
    layer_probes,
    linear_probe_accuracy,
)
from interlingua.evaluation.svcca import random_svcca, svcca
from interlingua.modules.model import TranslationNetwork
from interlingua.modules.transformer import sinusoids

VOCAB = 23
ENCODERS = [
    pytest.param({"type": "bilstm", "hidden": 16, "layers": 2}, id="bilstm"),
    pytest.param({"type": "transformer", "hidden": 16, "heads": 4, "layers": 3}, id="transformer-pre"),
    pytest.param({"type": "transformer", "hidden": 16, "heads": 4, "layers": 2, "norm": "post",
                  "residual_drop_layer": 1, "variational_dropout": True}, id="transformer-post-paper004"),
]


def encoder_of(settings: dict):
    torch.manual_seed(0)
    cfg = ModelConfig.model_validate({"embed_dim": 12, "encoder": settings, "bridge": {"type": "none"},
                                      "decoder": {"hidden": 16, "layers": 1}, "dropout": 0.3})
    return TranslationNetwork(cfg, {"en": VOCAB, "de": VOCAB}, ["en"], ["de"]).encoders["en"]


@pytest.mark.parametrize("settings", ENCODERS)
def test_last_layer_state_is_the_encoder_output(settings):
    encoder = encoder_of(settings)
    lengths = torch.tensor([6, 3, 1])
    src = torch.randint(4, VOCAB, (3, 6), generator=torch.Generator().manual_seed(1))
    src[torch.arange(6)[None, :] >= lengths[:, None]] = 0
    for training in (False, True):  # with dropout: the same random draws, in the same order
        encoder.train(training)
        torch.manual_seed(5)
        out, mask = encoder(src, lengths)
        torch.manual_seed(5)
        states, mask2 = encoder.layer_states(src, lengths)
        assert torch.equal(states[-1], out) and torch.equal(mask, mask2)
        assert len(states) == settings["layers"] + 1
        for s in states:
            assert s.shape[:2] == src.shape and (s[~mask] == 0).all()
    assert not torch.equal(states[0][:, :, :4], states[1][:, :, :4])


@pytest.mark.parametrize("settings", ENCODERS)
def test_the_first_layers_alone_give_the_same_states(settings):
    """`upto` k (what the agreement term on layer k runs of a target sentence): layers 1..k only, each state
    as in the whole stack, dropout's draws included."""
    encoder = encoder_of(settings)
    lengths = torch.tensor([5, 2])
    src = torch.randint(4, VOCAB, (2, 5), generator=torch.Generator().manual_seed(2))
    for training in (False, True):
        encoder.train(training)
        torch.manual_seed(7)
        whole, _ = encoder.layer_states(src, lengths)
        for k in range(settings["layers"]):
            torch.manual_seed(7)
            first, mask = encoder.layer_states(src, lengths, upto=k)
            assert len(first) == k + 1 and all(torch.equal(a, b) for a, b in zip(first, whole))


def test_svcca_is_one_under_an_invertible_map_and_low_for_independent_data():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((400, 6)) @ rng.standard_normal((6, 24)) + 1e-3 * rng.standard_normal((400, 24))
    mapped = a @ rng.standard_normal((24, 24))
    assert svcca(a, mapped) > 0.99
    unrelated = svcca(a, rng.standard_normal((400, 24)))
    assert unrelated < 0.4
    assert random_svcca(400, 24, 24) < 0.4
    assert svcca(a, a[::-1].copy()) < 0.4  # the rows must be aligned: shuffled items do not correlate


def test_probes_recover_position_from_positional_states_and_not_from_noise():
    rng = np.random.default_rng(1)
    lengths = rng.integers(3, 12, size=500)

    def states(n: int, positional: bool) -> np.ndarray:
        pos = sinusoids(torch.arange(n), 16).numpy()
        x = pos + 0.05 * rng.standard_normal((n, 16)) if positional else rng.standard_normal((n, 16))
        return np.stack([x, rng.standard_normal((n, 16))]).astype(np.float32)  # layer 0 positional, layer 1 noise

    ids = [rng.integers(4, 9, size=n) for n in lengths]
    train = [states(n, True) for n in lengths[:400]]
    test = [states(n, True) for n in lengths[400:]]
    token_acc, position_acc = layer_probes(train, ids[:400], test, ids[400:])
    assert position_acc[0] > 0.97
    assert position_acc[1] < 0.3            # chance: about 1/9
    assert token_acc[1] < 0.45              # five token ids: chance 0.2


def test_probe_learns_token_identity_and_counts_unseen_classes_wrong():
    rng = np.random.default_rng(2)
    table = rng.standard_normal((30, 16))
    y = rng.integers(0, 30, size=3000)
    x = table[y] + 0.1 * rng.standard_normal((3000, 16))
    acc, _ = linear_probe_accuracy(x[:2500], y[:2500], x[2500:], y[2500:], 30)
    assert acc > 0.97
    acc_unseen, _ = linear_probe_accuracy(x[:2500], y[:2500], x[2500:], np.full(500, -1), 30)
    assert acc_unseen == 0.0


def test_language_id_from_states_with_a_language_offset():
    rng = np.random.default_rng(3)
    offsets = {lang: 3 * rng.standard_normal(16) for lang in ("xa", "xb", "xc")}
    train = {lang: rng.standard_normal((400, 16)) + o for lang, o in offsets.items()}
    test = {lang: rng.standard_normal((100, 16)) + o for lang, o in offsets.items()}
    acc, confusion = language_id(train, test)
    assert acc > 0.97
    assert confusion.shape == (3, 3) and confusion.sum() == 300 and np.trace(confusion) == round(acc * 300)
    same = {lang: rng.standard_normal((400, 16)) for lang in offsets}
    assert language_id(same, {lang: rng.standard_normal((100, 16)) for lang in offsets})[0] < 0.5


def test_retrieval_finds_the_aligned_sentence():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((50, 8))
    keys = [f"s{i}" for i in range(50)]
    assert keyed_retrieval_share(a, a @ np.eye(8) + 0.01 * rng.standard_normal((50, 8)), keys, keys) == 1.0
    assert keyed_retrieval_share(a, rng.standard_normal((50, 8)), keys, keys) < 0.2


# --- end to end ----------------------------------------------------------------------------------

WORDS = {"xa": list("abcdefgh"), "xb": list("12345678"), "xc": list("ijklmnop")}


@pytest.fixture(scope="module")
def three_way_corpus(tmp_path_factory) -> Path:
    """xa sentences of 2-6 words; xb: mapped and reversed; xc: mapped in order (multi-way splits)."""
    root = tmp_path_factory.mktemp("encoder_corpus")
    rng = random.Random(5)
    texts = {}
    for split, n in (("train", 400), ("val", 60), ("test", 40)):
        xa = [[rng.randrange(8) for _ in range(rng.randint(2, 6))] for _ in range(n)]
        sents = {"xa": xa, "xb": [s[::-1] for s in xa], "xc": xa}
        texts[split] = {lang: [" ".join(WORDS[lang][w] for w in s) for s in ss] for lang, ss in sents.items()}
    return write_multiway_corpus(root, "three_way", texts)


def train_tiny(corpus: Path, work: Path, encoder: dict) -> Path:
    from interlingua.training.trainer import train
    cfg = parse_config(tiny_config(
        corpus, work,
        preprocess={"vocab_size": 50, "max_train_sentences": None, "max_valid_sentences": 20, "max_len": 20},
        directions={"mode": "explicit", "pairs": [["xa", "xb"], ["xc", "xb"]]},
        model={"embed_dim": 16, "encoder": encoder, "bridge": {"heads": 4, "hidden": 16}},
        train={"max_steps": 40, "valid_every": 40, "log_every": 20, "batch_size": 20, "lr": 0.005, "seed": 1,
               "threads": 1, "precision": "fp32"}))
    return train(cfg).best_checkpoint


@pytest.fixture(scope="module", params=[
    pytest.param({"type": "bilstm", "hidden": 16, "layers": 2}, id="bilstm"),
    pytest.param({"type": "transformer", "hidden": 16, "heads": 4, "layers": 2, "residual_drop_layer": 1},
                 id="transformer"),
])
def tiny_checkpoint(request, three_way_corpus, tmp_path_factory) -> Path:
    return train_tiny(three_way_corpus, tmp_path_factory.mktemp("encoder_run"), request.param)


def test_encoder_layers_of_a_trained_model(tiny_checkpoint):
    from interlingua import load
    model = load(tiny_checkpoint, "cpu")
    texts = ["a b c", "", "h g f e d"]
    layers = model.encoder_layers(texts, "xa", batch_size=2)
    ids = model.token_ids(texts, "xa")
    depth = 3
    assert [x.shape[:2] for x in layers] == [(depth, len(i)) for i in ids] and layers[0].dtype == np.float32
    alone = model.encoder_layers(["h g f e d"], "xa")[0]
    np.testing.assert_allclose(alone, layers[2], atol=1e-5)  # padding changes nothing


def test_a_source_prefix_is_read_but_not_returned(tiny_checkpoint, monkeypatch):
    """A shared model's language tag goes in front of the sentence and its state is dropped."""
    from interlingua import load
    from interlingua.inference import api
    from interlingua.model_files.load import load_model
    model = load(tiny_checkpoint, "cpu")
    plain = model.encoder_layers(["a b c"], "xa")[0]
    monkeypatch.setattr(api, "source_prefix", lambda *args: 5)
    tagged = model.encoder_layers(["a b c"], "xa")[0]
    ids = torch.tensor([[5, *model.token_ids(["a b c"], "xa")[0].tolist()]])
    with torch.no_grad():
        encoder = load_model(tiny_checkpoint).network.encoder_for("xa")
        direct, _ = encoder.layer_states(ids, torch.tensor([ids.size(1)]))
    assert tagged.shape == plain.shape
    np.testing.assert_allclose(tagged, torch.stack(direct)[:, 0, 1:].numpy(), atol=1e-6)
    assert not np.allclose(tagged[-1], plain[-1], atol=1e-4)  # the context now holds the tag


def test_analyze_encoder_cli_writes_the_report(tiny_checkpoint, three_way_corpus, tmp_path, capsys):
    out = tmp_path / "analysis"
    code = main(["analyze", "encoder", str(tiny_checkpoint), "--split", "test", "--max-sentences", "30",
                 "--svcca-k", "4", "--out", str(out), "--device", "cpu"])
    assert code == 0, capsys.readouterr().err
    for name in ("encoder_analysis.md", "encoder_analysis.json", "encoder_layers.png", "language_id.png"):
        assert (out / name).stat().st_size > 0
    report = json.loads((out / "encoder_analysis.json").read_text())
    assert report["languages"] == ["xa", "xc"] and report["layers"] == ["emb", "1", "2"]
    assert report["tokens"]["val"]["xa"] > 0 and report["pair_sentences"] == {"xa-xc": 30}
    for key in ("token_accuracy", "position_accuracy", "svcca_fixed", "svcca_fixed_gaussian", "svcca_fixed_permuted",
                "cka", "cka_gaussian", "cka_permuted", "svcca_99", "svcca_99_random", "retrieval"):
        values = report["mean"][key]
        assert len(values) == 3 and all(0.0 <= v <= 1.0 + 1e-12 for v in values), key
        assert key in ("token_accuracy", "position_accuracy") or len(report[key]["xa-xc"]) == 3, key
    assert report["svcca_k"] == 4 and report["svcca_fixed_k"] == {"xa-xc": [4, 4, 4]}
    kept = report["svcca_99_kept"]["xa-xc"]
    assert len(kept) == 3 and all(len(k) == 2 and 1 <= min(k) and max(k) <= 29 for k in kept)
    assert report["mean"]["svcca_99_kept"] == [sum(k) / 2 for k in kept]
    assert "confounded" in report["notes"]["svcca_99"] and "svcca" not in report
    assert report["mean"]["token_accuracy"][0] > 0.9  # the embeddings name the token
    assert set(report["token_ceiling"]) == {"xa", "xc"} and report["token_ceiling"]["xa"] == 1.0
    assert 0.0 <= report["language_id_accuracy"] <= 1.0 and np.asarray(report["confusion"]).sum() > 0
    text = (out / "encoder_analysis.md").read_text()
    for heading in ("## Averages per layer", "## Fixed-k SVCCA (k = 4) per language pair",
                    "## Linear CKA per language pair", "## SVCCA at 99% of the variance per language pair, confounded"):
        assert heading in text, heading
    assert "| layer | token id | position | SVCCA k=4 | permuted | Gaussian | CKA | permuted | Gaussian | retrieval |" \
        in text and "k = 4 directions in every layer and pair" in text


def test_svcca_k_option_defaults_to_the_library_value():
    from interlingua.cli import build_parser
    from interlingua.evaluation import registry
    from interlingua.evaluation.svcca import SVCCA_K
    assert build_parser().parse_args(["analyze", "encoder", "m.pt"]).svcca_k is None   # report_encoder: SVCCA_K
    option = registry.SVCCA_K
    assert f"default {SVCCA_K}," in option.help and option in registry.EVALUATIONS["encoder"].options


def test_analyze_encoder_errors_are_one_line(tiny_checkpoint, tmp_path, capsys):
    cases = [
        ["analyze", "encoder", str(tiny_checkpoint), "--languages", "zz", "--out", str(tmp_path)],
        ["analyze", "encoder", str(tmp_path / "missing.pt"), "--out", str(tmp_path)],
        ["analyze", "encoder", str(tiny_checkpoint), "--corpus", str(tmp_path / "none.yaml"), "--out", str(tmp_path)],
    ]
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    cases.append(["analyze", "encoder", str(bad), "--out", str(tmp_path)])
    for argv in cases:
        assert main([*argv, "--device", "cpu"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    assert main(["analyze", "encoder", str(tiny_checkpoint), "--languages", "zz", "--device", "cpu"]) == 2
    assert "'zz'" in capsys.readouterr().err
