"""Training options and what they decide: precision, wall-clock budget, label smoothing, dev BLEU."""
from __future__ import annotations

import json
import logging
import math
from types import SimpleNamespace

import numpy as np
import pytest
import sacrebleu
import torch
import torch.nn.functional as F
from conftest import tiny_config

from interlingua import precision
from interlingua.config import parse_config
from interlingua.data.batching import make_batch
from interlingua.data.corpus import load_corpus, read_group
from interlingua.data.prepare import prepare
from interlingua.model_files.checkpoint import Checkpoint
from interlingua.modules import model as model_mod
from interlingua.modules.model import TranslationNetwork
from interlingua.precision import autocast
from interlingua.training import precision_probe
from interlingua.training import trainer as trainer_mod
from interlingua.training.build import build_run
from interlingua.training.trainer import Trainer, train
from interlingua.training.validation import evaluate_devset, translate_devset

# -- precision: auto ------------------------------------------------------------------------

AMD_ZEN4 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni\nbogomips\t: 4000\n"
SAPPHIRE_RAPIDS = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n"
AMX_ONLY = "processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_bf16 amx_tile\n"
OLD_XEON = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_vnni\n"


def _cpu(monkeypatch, cpuinfo, amx=False, avx512_bf16=False, speedup=1.5):
    """A CPU with these flags on which the bf16 probe measures `speedup`."""
    monkeypatch.setattr(precision, "cpu_flags", lambda: precision.parse_cpu_flags(cpuinfo))
    monkeypatch.setattr(precision.torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
    monkeypatch.setattr(precision.torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16, raising=False)
    probes = []

    def probe(*args, **kwargs) -> float:
        probes.append(1)
        return speedup

    monkeypatch.setattr(precision, "measure_bf16_speedup", probe)  # the LSTM probe
    monkeypatch.setattr(precision_probe, "measure_speedup", probe)  # the trainer's probe of its own model
    return probes


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERLINGUA_CACHE_DIR", str(tmp_path / "cache"))


def test_cpu_flags_are_read_as_words():
    assert "amx_bf16" in precision.parse_cpu_flags(SAPPHIRE_RAPIDS)
    assert precision.parse_cpu_flags(AMD_ZEN4) >= {"avx512_bf16", "avx512f"}
    assert "amx_bf16" not in precision.parse_cpu_flags(AMD_ZEN4)
    assert precision.parse_cpu_flags("no flags line at all\n") == frozenset()
    assert precision.parse_cpu_model("processor\t: 0\nmodel name\t: AMD EPYC 9B14\n") == "AMD EPYC 9B14"


@pytest.mark.parametrize("cpuinfo, speedup, expected", [
    (SAPPHIRE_RAPIDS, 1.9, "bf16"),  # AMX and AVX512-BF16, bf16 measured faster
    (AMX_ONLY, 1.9, "bf16"),
    (AMD_ZEN4, 1.5, "bf16"),  # AVX512-BF16 where it is fast (AMD Zen 4)
    (AMD_ZEN4, 0.69, "fp32"),  # AVX512-BF16 where bf16 steps are slower (Intel Xeon without AMX)
    (AMD_ZEN4, 1.05, "fp32"),  # no clear gain: fp32
    (OLD_XEON, 9.0, "fp32"),  # bf16 would be emulated: no probe at all
], ids=["amx+avx512_bf16", "amx", "avx512_bf16-fast", "avx512_bf16-slow", "avx512_bf16-even", "neither"])
def test_auto_precision_is_bf16_only_with_native_bf16_measured_faster(cpuinfo, speedup, expected, monkeypatch):
    # the flags decide, not torch's probes
    probes = _cpu(monkeypatch, cpuinfo, amx=True, avx512_bf16=True, speedup=speedup)
    assert precision.resolve_precision("auto") == expected
    assert precision.resolve_precision("fp32") == "fp32"
    assert len(probes) == (0 if cpuinfo == OLD_XEON else 1)


def test_the_probe_runs_once_per_machine_and_its_answer_is_cached(monkeypatch, tmp_path):
    probes = _cpu(monkeypatch, AMD_ZEN4, speedup=0.7)
    assert precision.resolve_precision("auto") == "fp32" and len(probes) == 1
    assert precision.resolve_precision("auto") == "fp32" and len(probes) == 1  # from the cache
    cached = json.loads(precision.cache_path().read_text())
    assert precision.cache_path().parent == tmp_path / "cache"
    [(key, entry)] = cached.items()
    assert "avx512_bf16" in key and f"threads {torch.get_num_threads()}" in key and entry["speedup"] == 0.7
    monkeypatch.setattr(precision.torch, "get_num_threads", lambda: 97)  # another setting: measured again
    assert precision.resolve_precision("auto") == "fp32" and len(probes) == 2
    precision.cache_path().write_text("{not json")  # a damaged cache is measured anew and rewritten
    assert precision.resolve_precision("auto") == "fp32" and len(probes) == 3
    assert len(json.loads(precision.cache_path().read_text())) == 1


def test_the_real_probe_measures_a_ratio():
    speedup = precision.measure_bf16_speedup(steps=1, batch=4, length=4, hidden=32, vocab=50)
    assert math.isfinite(speedup) and speedup > 0


@pytest.mark.parametrize("amx, avx512_bf16, expected", [
    (True, False, "bf16"), (False, True, "bf16"), (False, False, "fp32")])
def test_auto_precision_asks_torch_where_cpuinfo_is_missing(amx, avx512_bf16, expected, monkeypatch):
    _cpu(monkeypatch, "", amx=amx, avx512_bf16=avx512_bf16)
    assert precision.resolve_precision("auto") == expected


def test_explicit_bf16_is_kept_but_warned_about_without_native_bf16(monkeypatch, caplog):
    _cpu(monkeypatch, OLD_XEON)
    with caplog.at_level(logging.WARNING, logger="interlingua.precision"):
        assert precision.resolve_precision("bf16") == "bf16"
    assert "no native bf16" in caplog.text
    caplog.clear()
    _cpu(monkeypatch, AMD_ZEN4)
    with caplog.at_level(logging.WARNING, logger="interlingua.precision"):
        assert precision.resolve_precision("bf16") == "bf16"
    assert caplog.text == ""


@pytest.mark.parametrize("cpuinfo, expected", [(OLD_XEON, "fp32"), (AMD_ZEN4, "bf16")], ids=["neither", "avx512_bf16"])
def test_trainer_trains_in_the_precision_auto_resolves_to(cpuinfo, expected, multi30k_corpus, prepared, tmp_path,
                                                          monkeypatch):
    _cpu(monkeypatch, cpuinfo)
    run = build_run(_config(multi30k_corpus, tmp_path / "run"), data=prepared)  # precision: auto (the default)
    assert run.cfg.train.precision == "auto" and run.precision == expected


def test_auto_precision_times_the_model_being_trained(multi30k_corpus, prepared, tmp_path, monkeypatch):
    _cpu(monkeypatch, AMD_ZEN4)
    timed = []

    def measure(step, steps=4):  # runs the model's real step once per precision; reports bf16 slower
        for p in ("fp32", "bf16"):
            step(p)
            timed.append(p)
        return 0.8

    monkeypatch.setattr(precision_probe, "measure_speedup", measure)
    run = build_run(_config(multi30k_corpus, tmp_path / "run"), data=prepared)
    assert run.precision == "fp32" and timed == ["fp32", "bf16"]
    [key] = json.loads(precision.cache_path().read_text())
    assert key.endswith("model bilstm-attention-lstm " + key.rsplit(" ", 1)[1])  # cached per model
    build_run(_config(multi30k_corpus, tmp_path / "again"), data=prepared)  # same model: from the cache
    assert timed == ["fp32", "bf16"]


def test_the_model_probe_leaves_weights_batches_and_random_state_alone(multi30k_corpus, prepared, tmp_path):
    run = build_run(_config(multi30k_corpus, tmp_path / "run", precision="fp32"), data=prepared)
    batches = run.batches[run.directions[0]]
    weights = {k: v.clone() for k, v in run.network.state_dict().items()}
    position, rng = json.dumps(batches.state_dict(), default=str), torch.get_rng_state()
    probe = precision_probe.model_bf16_probe(run.network, batches, run.runtime.device, {"label_smoothing": 0.1},
                                             run.runtime.rng_state, run.runtime.set_rng_state, steps=1)
    speedup = probe()
    assert math.isfinite(speedup) and speedup > 0
    assert all(torch.equal(v, weights[k]) for k, v in run.network.state_dict().items())
    assert all(p.grad is None for p in run.network.parameters())
    assert json.dumps(batches.state_dict(), default=str) == position and torch.equal(torch.get_rng_state(), rng)


# -- a prepared corpus and a tiny run, shared by the trainer tests below ----------------------

@pytest.fixture(scope="module")
def prepared(multi30k_corpus, tmp_path_factory):
    """Short max_len, so that many dev references are longer than their subword ids."""
    cfg = parse_config(tiny_config(multi30k_corpus, tmp_path_factory.mktemp("options"),
                                   preprocess={"max_len": 12, "max_valid_sentences": 30}))
    return prepare(cfg)


def _config(corpus, work, **train):
    return parse_config(tiny_config(corpus, work, preprocess={"max_len": 12, "max_valid_sentences": 30},
                                    train={"max_steps": 1000, "valid_every": 1000, "precision": "auto", **train}))


# -- max_minutes --------------------------------------------------------------------------------

def _fake_clock(monkeypatch, seconds_per_call=1.0):
    """Each perf_counter call advances one second: a step (two calls) takes exactly 1 s."""
    now = {"t": 0.0}

    def perf_counter():
        now["t"] += seconds_per_call
        return now["t"]

    monkeypatch.setattr(trainer_mod, "time", SimpleNamespace(perf_counter=perf_counter))


def test_max_minutes_stops_training_then_validates_and_saves(multi30k_corpus, prepared, tmp_path, monkeypatch):
    _fake_clock(monkeypatch)
    work = tmp_path / "run"
    result = train(_config(multi30k_corpus, work, max_minutes=0.1), data=prepared)  # 6 s
    assert result.steps == 6
    lines = [json.loads(x) for x in (work / "metrics.jsonl").read_text().splitlines()]
    assert [(r["type"], r["step"]) for r in lines] == [("valid", 6)]
    assert lines[-1]["elapsed_s"] == 6.0
    for name in ("last.pt", "best.pt"):
        state = Checkpoint.read(work / name).training
        assert state.step == 6 and state.elapsed == 6.0
    assert result.best_checkpoint == work / "best.pt" and result.history[-1].step == 6
    assert not (work / "curves.png").exists()  # train.curves off (the tests' tiny configs): metrics only

    # The spent budget is part of the state: resuming does nothing more ...
    again = train(_config(multi30k_corpus, work, max_minutes=0.1), resume=True, data=prepared)
    assert again.steps == 6 and len((work / "metrics.jsonl").read_text().splitlines()) == 1
    # ... and a larger one continues where the first stopped.
    more = train(_config(multi30k_corpus, work, max_minutes=0.2), resume=True, data=prepared)
    assert more.steps == 12 and [h.step for h in more.history] == [6, 12]


# -- label smoothing ------------------------------------------------------------------------------

def _tiny_model_and_batch(**model):
    cfg = parse_config(tiny_config("corpus.yaml", "work", model={"dropout": 0.0, **model}))
    torch.manual_seed(0)
    net = TranslationNetwork(cfg.model, {"en": 50, "de": 60}, ["en"], ["de"])
    rng = np.random.default_rng(0)
    src = [rng.integers(4, 50, size=n).astype(np.int32) for n in (7, 3, 5, 9)]
    tgt = [rng.integers(4, 60, size=n).astype(np.int32) for n in (6, 8, 2, 5)]
    return net, make_batch(src, tgt, "en", "de", None)


def _loss(net, b, eps, sample=0, penalty=0.0):
    return net.loss(b.src, b.src_lengths, b.tgt_in, b.tgt_out, "en", "de", penalty, eps, sample)


def _smoothed_by_hand(logits, gold, eps):
    """(1 - eps) * NLL + eps * (mean over the classes of -log p), averaged over target tokens."""
    logp = torch.log_softmax(logits.double(), dim=-1)
    nll = -logp.gather(1, gold[:, None]).squeeze(1)
    return ((1 - eps) * nll + eps * (-logp.mean(dim=-1))).mean()


def test_label_smoothing_is_the_smoothed_cross_entropy():
    net, b = _tiny_model_and_batch()
    net.train()
    seen = {}
    net.decoder_for("de").generator.register_forward_hook(lambda m, i, out: seen.__setitem__("logits", out.detach()))
    gold = b.tgt_out[b.tgt_out != 0]
    eps = 0.1
    smoothed = _loss(net, b, eps)
    logits = seen["logits"].float()
    assert logits.shape == (len(gold), 60)
    assert smoothed.loss.item() == pytest.approx(_smoothed_by_hand(logits, gold, eps).item(), rel=1e-5)
    assert smoothed.loss.item() == pytest.approx(F.cross_entropy(logits, gold, label_smoothing=eps).item(), rel=1e-6)

    plain = _loss(net, b, 0.0)
    assert plain.loss.item() == pytest.approx(F.cross_entropy(logits, gold).item(), rel=1e-6)
    assert abs(smoothed.loss.item() - plain.loss.item()) > 1e-3
    # What is logged (nll_sum) stays the plain cross-entropy: smoothing changes only the gradient.
    assert smoothed.nll_sum == pytest.approx(plain.nll_sum) and smoothed.n_tokens == plain.n_tokens == len(gold)

    # ... and its gradient is F.cross_entropy's with label smoothing (one log-softmax serves both)
    net.zero_grad()
    _loss(net, b, eps).loss.backward()
    ours = {k: p.grad.clone() for k, p in net.named_parameters() if p.grad is not None}
    net.zero_grad()
    kept = {}
    hook = net.decoder_for("de").generator.register_forward_hook(lambda m, i, out: kept.__setitem__("logits", out))
    _loss(net, b, eps)
    hook.remove()
    F.cross_entropy(kept["logits"].float(), gold, label_smoothing=eps).backward()
    reference = {k: p.grad for k, p in net.named_parameters() if p.grad is not None}
    assert ours.keys() == reference.keys() and len(ours) > 5
    for k, g in ours.items():
        torch.testing.assert_close(g, reference[k], rtol=1e-4, atol=1e-7)

    # With the penalty, the smoothed loss gets the same per-token penalty term as the plain one.
    with_penalty = _loss(net, b, eps, penalty=2.0)
    per_sentence = net.run_encoder(b.src, b.src_lengths, "en").penalty.float()
    assert with_penalty.loss.item() == pytest.approx(
        smoothed.loss.item() + 2.0 * per_sentence.sum().item() / len(gold), rel=1e-5)


def test_label_smoothing_with_a_sampled_softmax_spreads_over_the_sampled_classes(monkeypatch):
    net, b = _tiny_model_and_batch()
    net.train()
    seen = {}
    real = model_mod._sampled_logits

    def spy(*args):
        seen["logits"], seen["gold"] = real(*args)
        return seen["logits"], seen["gold"]

    monkeypatch.setattr(model_mod, "_sampled_logits", spy)
    eps = 0.2
    out = _loss(net, b, eps, sample=5)
    logits, gold = seen["logits"].detach(), seen["gold"]
    assert logits.shape[1] < 60  # the batch's gold types plus 5 draws, not the vocabulary
    assert out.loss.item() == pytest.approx(_smoothed_by_hand(logits, gold, eps).item(), rel=1e-5)
    plain = _loss(net, b, 0.0, sample=5)
    assert abs(out.loss.item() - plain.loss.item()) > 1e-3


def test_trainer_passes_label_smoothing_to_the_loss(multi30k_corpus, prepared, tmp_path):
    run = build_run(_config(multi30k_corpus, tmp_path / "run", max_steps=2, label_smoothing=0.15,
                            softmax_sample=7, penalty_weight=0.5), data=prepared)
    calls = []
    real = run.network.loss

    def spy(*args, **kwargs):
        calls.append(args[6:9])
        return real(*args, **kwargs)

    run.network.loss = spy
    Trainer(run).train()
    assert calls[:2] == [(0.5, 0.15, 7)] * 2  # the two training steps (validation calls with defaults)


# -- dev BLEU against the corpus's own lines ---------------------------------------------------------

def test_dev_bleu_scores_the_raw_reference_lines(multi30k_corpus, prepared, tmp_path):
    cfg = _config(multi30k_corpus, tmp_path / "run", max_steps=40, lr=0.01)
    run = build_run(cfg, data=prepared)
    Trainer(run).train()
    dev = run.devsets[("en", "de")]
    raw = read_group(load_corpus(multi30k_corpus).groups("val")[0])
    assert dev.references == raw["de"][:30]
    # The old references, rebuilt from ids cut to max_len=12, are shorter: they must not be used.
    rebuilt = [prepared.vocabs["de"].decode(t.tolist()) for t in dev.tgt]
    assert sum(len(r.split()) for r in rebuilt) < 0.8 * sum(len(r.split()) for r in dev.references)

    max_len = 2 * cfg.preprocess.max_len
    with autocast(run.precision):  # as the trainer validates
        hyps = translate_devset(run.network, dev, prepared.vocabs, max_len=max_len)
        scores = evaluate_devset(run.network, dev, prepared.vocabs, max_len=max_len)
    assert sum(map(len, hyps)) > 0
    direct = sacrebleu.corpus_bleu(hyps, [raw["de"][:30]], lowercase=True)
    assert scores.bleu == pytest.approx(direct.score, abs=1e-9)
    assert direct.score != pytest.approx(sacrebleu.corpus_bleu(hyps, [rebuilt], lowercase=True).score)
    chrf = sacrebleu.metrics.CHRF(lowercase=True).corpus_score(hyps, [raw["de"][:30]])
    assert scores.chrf == pytest.approx(chrf.score, abs=1e-9)
    # ... and what the training log records is that same number.
    logged = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert logged["step"] == 40 and logged["directions"]["en-de"]["bleu"] == pytest.approx(direct.score, abs=1e-9)


def test_raw_references_survive_the_prepared_cache(multi30k_corpus, tmp_path):
    cfg = parse_config(tiny_config(multi30k_corpus, tmp_path / "run", preprocess={"max_train_sentences": 50}))
    fresh, cached = prepare(cfg), prepare(cfg)
    for data in (fresh, cached):
        val = data.groups("val")[0]
        assert val.texts is not None and len(val.texts["en"]) == len(val.ids["en"]) == 1014
        assert data.groups("train")[0].texts is None


def test_dev_references_without_raw_text_are_rebuilt_with_a_warning(multi30k_corpus, prepared, tmp_path, caplog):
    texts = [g.texts for g in prepared.groups("val")]
    try:
        for g in prepared.groups("val"):
            g.texts = None
        with caplog.at_level(logging.WARNING, logger="interlingua.training.trainer"):
            run = build_run(_config(multi30k_corpus, tmp_path / "run"), data=prepared)
    finally:
        for g, t in zip(prepared.groups("val"), texts):
            g.texts = t
    assert "rebuilt from subword ids cut to max_len=12" in caplog.text
    dev = run.devsets[("en", "de")]
    assert dev.references == [prepared.vocabs["de"].decode(t.tolist()) for t in dev.tgt]


def test_adam_betas_reach_the_optimizer_and_bad_ones_name_the_key(multi30k_corpus, tmp_path):
    from interlingua.errors import ConfigError
    cfg = parse_config(tiny_config(multi30k_corpus, tmp_path / "run", train={"adam_betas": [0.9, 0.98]}))
    assert cfg.train.adam_betas == (0.9, 0.98)
    run = build_run(cfg)
    assert run.optimizer.param_groups[0]["betas"] == (0.9, 0.98)
    assert parse_config(tiny_config(multi30k_corpus, tmp_path / "d")).train.adam_betas == (0.9, 0.999)
    with pytest.raises(ConfigError, match="adam_betas"):
        parse_config(tiny_config(multi30k_corpus, tmp_path / "bad", train={"adam_betas": [0.9, 1.0]}))
