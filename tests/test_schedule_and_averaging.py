"""The learning-rate schedule (constant, inverse_sqrt warm-up and decay), tied Transformer decoder
embeddings, and checkpoint averaging (`interlingua average`)."""
from __future__ import annotations

import json
import math
import shutil

import pytest
import torch
from conftest import tiny_config
from pydantic import ValidationError

import interlingua
from interlingua.cli import main
from interlingua.config import ModelConfig, parse_config
from interlingua.data.prepare import prepare
from interlingua.errors import CheckpointError, ConfigError
from interlingua.model_files.checkpoint import Checkpoint, average_checkpoints, read_checkpoint
from interlingua.modules.model import TranslationNetwork
from interlingua.training.build import build_run
from interlingua.training.trainer import Trainer, train

TIED_DECODER = {"type": "transformer", "layers": 1, "heads": 4, "tie_embeddings": True}


def _config(corpus, work, model=None, **train):
    return parse_config(tiny_config(corpus, work, preprocess={"max_len": 12, "max_valid_sentences": 10},
                                    model=model or {},
                                    train={"max_steps": 10, "valid_every": 1000, "log_every": 1, **train}))


@pytest.fixture(scope="module")
def prepared(multi30k_corpus, tmp_path_factory):
    return prepare(_config(multi30k_corpus, tmp_path_factory.mktemp("sched")))


def _lrs_used(run):
    """The lr of every weight update, read in the training forward pass before it."""
    used = []
    real = run.network.loss

    def spy(*args, **kwargs):
        if run.network.training:
            used.append(run.optimizer.param_groups[0]["lr"])
        return real(*args, **kwargs)

    run.network.loss = spy
    return used


def _logged_lrs(work):
    lines = [json.loads(x) for x in (work / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["lr"] for r in lines if r["type"] == "train"}


# -- learning-rate schedule --------------------------------------------------------------------

def test_inverse_sqrt_warms_up_then_decays_as_the_formula(multi30k_corpus, prepared, tmp_path):
    lr, warmup = 0.005, 4
    work = tmp_path / "run"
    run = build_run(_config(multi30k_corpus, work, lr=lr, lr_schedule="inverse_sqrt", warmup_steps=warmup),
                    data=prepared)
    used = _lrs_used(run)
    Trainer(run).train()
    expected = [lr * min(n / warmup, math.sqrt(warmup / n)) for n in range(1, 11)]
    assert used == pytest.approx(expected, rel=1e-12)
    assert used[warmup - 1] == pytest.approx(lr) and max(used) == pytest.approx(lr)  # the peak: end of warm-up
    assert used[0] == pytest.approx(lr / warmup) and used[-1] == pytest.approx(lr * math.sqrt(0.4))
    logged = _logged_lrs(work)
    assert sorted(logged) == list(range(1, 11))
    assert [logged[s] for s in range(1, 11)] == pytest.approx(expected, rel=1e-12)
    assert Checkpoint.read(work / "last.pt").training.lr_scheduler["last_epoch"] == 10


def test_constant_schedule_is_the_default_and_keeps_the_lr(multi30k_corpus, prepared, tmp_path):
    cfg = _config(multi30k_corpus, tmp_path / "run", lr=0.003, max_steps=4)
    assert cfg.train.lr_schedule == "constant" and cfg.train.warmup_steps == 4000
    run = build_run(cfg, data=prepared)
    used = _lrs_used(run)
    Trainer(run).train()
    assert used == [0.003] * 4
    assert list(_logged_lrs(tmp_path / "run").values()) == [0.003] * 4


def test_the_budget_decay_takes_the_lr_linearly_to_zero_over_the_last_part_of_max_steps(multi30k_corpus, prepared,
                                                                                         tmp_path):
    """`train.lr_decay_from: 0.5` on top of the inverse_sqrt schedule: the schedule's lr for updates 1-5, then
    falling by a fifth of it per update to a fifth at update 10 (and 0 after the last)."""
    lr, warmup = 0.004, 2
    work = tmp_path / "run"
    run = build_run(_config(multi30k_corpus, work, lr=lr, lr_schedule="inverse_sqrt", warmup_steps=warmup,
                            lr_decay_from=0.5), data=prepared)
    used = _lrs_used(run)
    Trainer(run).train()
    schedule = [lr * min(n / warmup, math.sqrt(warmup / n)) for n in range(1, 11)]
    decay = [1, 1, 1, 1, 1, 1, 0.8, 0.6, 0.4, 0.2]
    assert used == pytest.approx([a * b for a, b in zip(schedule, decay)], rel=1e-12)
    logged = _logged_lrs(work)
    assert [logged[s] for s in range(1, 11)] == pytest.approx(used, rel=1e-12)


def test_the_budget_decay_follows_the_time_budget_where_it_ends_the_run_first():
    """The budget spent is the larger share of max_steps and max_minutes: a run at a tenth of its steps but
    three quarters of its minutes is three quarters through."""
    from interlingua.training.run import budget_lr_factor
    assert budget_lr_factor(None, 100, 10.0, 99, 599.0) == 1.0
    assert budget_lr_factor(0.5, 100, 10.0, 10, 450.0) == pytest.approx(0.5)   # time: 0.75 spent
    assert budget_lr_factor(0.5, 100, 10.0, 90, 60.0) == pytest.approx(0.2)    # steps: 0.9 spent
    assert budget_lr_factor(0.5, 100, None, 25, 1e9) == 1.0                    # no time budget: steps only
    assert budget_lr_factor(0.0, 100, 10.0, 0, 600.0) == 0.0                   # spent: nothing more to learn


@pytest.mark.parametrize("train, key", [({"lr_schedule": "cosine"}, "train.lr_schedule"),
                                        ({"warmup_steps": 0}, "train.warmup_steps"),
                                        ({"lr_decay_from": 1.0}, "train.lr_decay_from")])
def test_bad_schedule_settings_are_config_errors(multi30k_corpus, tmp_path, train, key):
    with pytest.raises(ConfigError, match=key):
        parse_config(tiny_config(multi30k_corpus, tmp_path, train=train))


# -- tied embeddings ---------------------------------------------------------------------------

def _tied_model(seed=0, **decoder):
    torch.manual_seed(seed)
    cfg = ModelConfig.model_validate({
        "embed_dim": 16, "encoder": {"type": "transformer", "hidden": 16, "heads": 4, "layers": 1},
        "bridge": {"heads": 3, "hidden": 8}, "decoder": {**TIED_DECODER, **decoder}, "dropout": 0.0})
    return TranslationNetwork(cfg, {"en": 23, "de": 29}, ["en"], ["de"])


@pytest.mark.parametrize("softmax_sample", [0, 5])
def test_tied_embeddings_are_one_parameter_updated_once(softmax_sample):
    net, untied = _tied_model(), _tied_model(tie_embeddings=False)
    dec = net.decoders["de"]
    assert dec.generator.weight is dec.embedding.embed.weight
    assert dec.generator.weight.shape == (29, 16)
    n_params = sum(p.numel() for p in net.parameters())
    assert sum(p.numel() for p in untied.parameters()) - n_params == 29 * 16
    before = dec.embedding.embed.weight.detach().clone()
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(3)
    src, tgt = torch.randint(4, 23, (3, 6), generator=gen), torch.randint(4, 29, (3, 7), generator=gen)
    out = net.loss(src, torch.tensor([6, 6, 6]), tgt[:, :-1], tgt[:, 1:], "en", "de", softmax_sample=softmax_sample)
    out.loss.backward()
    opt.step()
    after = dec.embedding.embed.weight.detach()
    assert not torch.equal(after, before)
    assert torch.equal(dec.generator.weight.detach(), after)
    # Sharing survives a round trip through a state dict.
    again = _tied_model(seed=1)
    again.load_state_dict(net.state_dict())
    d2 = again.decoders["de"]
    assert d2.generator.weight is d2.embedding.embed.weight and torch.equal(d2.generator.weight, after)


def test_tied_embeddings_need_the_decoder_width_equal_to_embed_dim():
    with pytest.raises(ValidationError, match="tie_embeddings needs decoder.hidden"):
        _tied_model(hidden=32, heads=4)


# -- checkpoint averaging ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def two_checkpoints(multi30k_corpus, prepared, tmp_path_factory):
    """last.pt after 3 and after 6 steps of one run (tied transformer decoder)."""
    work = tmp_path_factory.mktemp("avg") / "run"
    model = {"decoder": TIED_DECODER}
    train(_config(multi30k_corpus, work, model, max_steps=3), data=prepared)
    shutil.copy(work / "last.pt", work / "step3.pt")
    train(_config(multi30k_corpus, work, model, max_steps=6), resume=True, data=prepared)
    return work / "step3.pt", work / "last.pt"


def test_average_is_the_mean_of_the_tensors_and_translates(two_checkpoints, tmp_path):
    a, b = two_checkpoints
    out = average_checkpoints([a, b], tmp_path / "avg.pt")
    avg, pa, pb = read_checkpoint(out), read_checkpoint(a), read_checkpoint(b)
    assert "training" not in avg and avg["config"] == pa["config"] and avg["vocabs"] == pa["vocabs"]
    assert avg["model"].keys() == pa["model"].keys()
    differ = 0
    for k, v in avg["model"].items():
        assert v.dtype == pa["model"][k].dtype
        expected = (pa["model"][k].double() + pb["model"][k].double()) / 2
        torch.testing.assert_close(v.double(), expected, rtol=1e-6, atol=1e-7)
        differ += not torch.equal(pa["model"][k], pb["model"][k])
    assert differ > 0  # the two checkpoints really are different weights
    dec = "decoders.de."
    assert avg["model"][dec + "generator.weight"].data_ptr() == avg["model"][dec + "embedding.embed.weight"].data_ptr()
    model = interlingua.load(out, device="cpu")
    hyp = model.translate(["a man is riding a bike .", "two dogs play ."], "en", "de")
    assert len(hyp) == 2 and all(isinstance(h, str) for h in hyp)


def test_average_of_one_checkpoint_is_its_weights(two_checkpoints, tmp_path):
    a, _ = two_checkpoints
    avg = read_checkpoint(average_checkpoints([a], tmp_path / "one.pt"))
    for k, v in read_checkpoint(a)["model"].items():
        assert torch.equal(avg["model"][k], v)


def test_average_refuses_checkpoints_of_different_runs(two_checkpoints, multi30k_corpus, prepared, tmp_path):
    a, _ = two_checkpoints
    other = tmp_path / "other"
    train(_config(multi30k_corpus, other, {"decoder": {**TIED_DECODER, "layers": 2}}, max_steps=1), data=prepared)
    with pytest.raises(CheckpointError, match="config section 'model' differs"):
        average_checkpoints([a, other / "last.pt"], tmp_path / "bad.pt")
    assert not (tmp_path / "bad.pt").exists()


def test_average_through_the_cli(two_checkpoints, tmp_path, capsys):
    a, b = two_checkpoints
    out = tmp_path / "cli.pt"
    assert main(["average", "--out", str(out), str(a), str(b)]) == 0
    assert f"averaged 2 checkpoint(s) into {out}" in capsys.readouterr().out
    assert "training" not in read_checkpoint(out)
    assert main(["average", "--out", str(tmp_path / "x.pt"), str(a), str(tmp_path / "missing.pt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: checkpoint not found")
