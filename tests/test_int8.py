"""precision int8 (`interlingua.modules.int8`, `interlingua.inference.int8_probe`): int8 linear layers, the
LSTM's linear form, whole models against fp32, the command line, the service, errors and `auto`'s choice.

The models are the session's tiny models of the synthetic task (`tests/conftest.py`: `kind_models`, the
kinds matrix's; sentences of eight word types, translated reversed and word by word), trained for a few
seconds: a BiLSTM + attention bridge + LSTM model and a Transformer (no bridge, tied decoder embeddings).
Their layers are far below the size where int8 pays (`MIN_INT8_WEIGHTS`), so these tests quantize every
layer (threshold 0): more int8 than any real model gets. Which kernel runs a layer is measured on the
machine (`int8.time_kernels`); here a stand-in measurement (`fake_times`) says which kernel is fastest
where, torch._int_mm everywhere unless a test says otherwise, and each test has its own cache of
measurements.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO
from test_kinds_matrix import token_accuracy

import interlingua
from interlingua.cli import main
from interlingua.errors import ConfigError, InterlinguaError
from interlingua.inference import int8_probe
from interlingua.modules import int8
from interlingua.modules.int8 import Int8Linear, LinearLSTM, kernel_works, linear_lstms, quantize_network
from interlingua.runtime import Runtime, resolve_device_precision

KINDS = {"lstm": "bilstm-attention-lstm", "transformer": "transformer-none-transformer_tied"}
"""The two models, by their names in the session's `KINDS`."""
MIN_GREEDY_AGREEMENT = 0.9
"""Share of the 200 test sentences whose int8 translation (greedy, and beam 4) is the fp32 one, token for
token, with every layer in int8: measured 0.965-0.99 on the two tiny models."""
WORKING_KERNELS = [k for k in int8.KERNELS if kernel_works(k)]
MEASURE = int8.time_kernels
"""The real measurement (the tests' fixture replaces it by `fake_times`)."""


def fake_times(kernel_for: Callable[[str], str | None]) -> Callable:
    """A stand-in for `int8.time_kernels`: fp32 takes 1 ms at every layer shape, the kernel `kernel_for(shape)`
    names 0.5 ms (None: none), every other kernel 2 ms. Its `calls` list the shapes of each measurement."""
    calls: list[list[tuple[int, int]]] = []

    def measure(shapes, kernels):
        calls.append(sorted(shapes))
        seconds = {}
        for n_in, n_out in shapes:
            label = int8.shape_label(n_in, n_out)
            fastest = kernel_for(label)
            seconds[label] = {"fp32": 1e-3, **{k: 5e-4 if k == fastest else 2e-3 for k in kernels}}
        return int8.KernelTimes(seconds)

    measure.calls = calls  # type: ignore[attr-defined]
    return measure


@pytest.fixture(autouse=True)
def quantize_every_layer(monkeypatch, tmp_path):
    monkeypatch.setattr(int8, "MIN_INT8_WEIGHTS", 0)
    monkeypatch.setenv("INTERLINGUA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(int8, "time_kernels", fake_times(lambda shape: "int_mm"))


@pytest.fixture(scope="module")
def lstm_model(kind_models) -> Path:
    return kind_models[KINDS["lstm"]].checkpoint


@pytest.fixture(scope="module")
def transformer_model(kind_models) -> Path:
    return kind_models[KINDS["transformer"]].checkpoint


@pytest.fixture(scope="module", params=sorted(KINDS))
def trained(request) -> Path:
    """Each kind's checkpoint in turn."""
    return request.getfixturevalue(f"{request.param}_model")


def split_text(corpus: Path, split: str = "test") -> tuple[list[str], list[str]]:
    return ((corpus.parent / f"{split}.xa").read_text().splitlines(),
            (corpus.parent / f"{split}.xb").read_text().splitlines())


# --- the parts ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("fused", [True, False])
def test_the_linear_form_of_an_lstm_is_nn_lstm_in_fp32(layers, fused):
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(12, 16, num_layers=layers, batch_first=True).eval()
    linear = LinearLSTM.from_lstm(lstm, fused=fused)
    x, h0, c0 = torch.randn(3, 7, 12), torch.randn(layers, 3, 16), torch.randn(layers, 3, 16)
    with torch.no_grad():
        for state in ((h0, c0), None):
            want, (wh, wc) = lstm(x, state)
            got, (gh, gc) = linear(x, state)
            for a, b in ((want, got), (wh, gh), (wc, gc)):
                torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)
            step, _ = linear(x[:, :1], state)  # one token, as the decoder's search steps
            torch.testing.assert_close(step, want[:, :1], atol=1e-5, rtol=1e-5)


def test_an_lstm_decoder_in_linear_form_decodes_as_before(lstm_model):
    fp32 = interlingua.load(lstm_model, "cpu")
    sources = split_text(fp32.config.corpus)[0][:40]
    before = fp32.translate(sources, "xa", "xb", beam=3)
    assert linear_lstms(fp32._network) == 1
    assert isinstance(fp32._network.decoder_for("xb").lstm, LinearLSTM)
    assert fp32.translate(sources, "xa", "xb", beam=3) == before


@pytest.mark.parametrize("kernel", WORKING_KERNELS)
def test_int8_linear_is_close_to_fp32_and_each_row_is_on_its_own(kernel):
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 300)
    q = Int8Linear.from_linear(linear, kernel)
    x = torch.randn(9, 5, 64)
    with torch.inference_mode():
        want, got = linear(x), q(x)
        assert got.shape == want.shape and got.dtype == torch.float32
        assert float((got - want).abs().max() / want.abs().max()) < 0.02
        # rows alone or in other batches: bit for bit what they get in the whole batch (1 row: padded for oneDNN)
        assert torch.equal(q(x[3:4, 2:3]), got[3:4, 2:3])
        assert torch.equal(q(x[2:4, 1:2]), got[2:4, 1:2])
        assert torch.equal(q(x[:, 3]), got[:, 3])
        assert torch.equal(q(torch.zeros(2, 64)), linear.bias.detach().expand(2, -1))  # zero rows: the bias
    torch.testing.assert_close(q.dequantized_weight(), linear.weight.detach(), atol=float(q.scale.max() * 127), rtol=0)
    assert q.int8_weight().dtype == torch.int8 and q.int8_weight().abs().max() == 127


def test_a_shortlist_reads_the_int8_output_layer_as_dequantized_weights():
    from interlingua.modules.shortlist_decoding import output_layer_weights
    linear = torch.nn.Linear(16, 40)
    weight, bias = output_layer_weights(Int8Linear.from_linear(linear, WORKING_KERNELS[0]))
    assert weight.shape == (40, 16) and weight.dtype == torch.float32
    torch.testing.assert_close(weight, linear.weight.detach(), atol=2e-3, rtol=0)
    assert bias is not None and torch.equal(bias, linear.bias.detach())


def test_every_kernel_that_works_here_gives_the_same_products():
    assert "int_mm" in WORKING_KERNELS  # torch._int_mm at least works anywhere
    torch.manual_seed(0)
    linear = torch.nn.Linear(40, 70)
    x = torch.randn(6, 40)
    with torch.inference_mode():
        outs = [Int8Linear.from_linear(linear, k)(x) for k in WORKING_KERNELS]
    for out in outs[1:]:
        torch.testing.assert_close(out, outs[0], atol=1e-6, rtol=1e-6)


def test_tied_output_layer_is_quantized_and_the_embedding_keeps_its_fp32_table(transformer_model):
    fp32 = interlingua.load(transformer_model, "cpu")
    decoder = fp32._network.decoder_for("xb")
    table = decoder.embedding.embed.weight
    assert decoder.generator.weight is table
    before = table.detach().clone()
    assert quantize_network(fp32._network) > 0
    assert isinstance(decoder.generator, Int8Linear)
    assert decoder.embedding.embed.weight is table and table.dtype == torch.float32 and torch.equal(table, before)


# --- the kernel, measured ------------------------------------------------------------------------------


def test_the_measurement_times_every_kernel_against_fp32_and_gives_up_on_a_slow_one(monkeypatch):
    t0 = time.perf_counter()
    times = MEASURE([(128, 256), (64, 96)], WORKING_KERNELS)
    assert time.perf_counter() - t0 < 30  # bounded (a fraction of a second on a quiet machine)
    assert set(times.seconds) == {"64x96", "128x256"}
    for row in times.seconds.values():
        assert row["fp32"] > 0 and set(row) == {"fp32", *WORKING_KERNELS}
        for k in WORKING_KERNELS:  # timed, or given up (slower than GIVE_UP_FACTOR x fp32) and said why
            assert (row[k] or 0) > 0 or "fp32's time at " in times.given_up[k]
    # a kernel far slower than fp32 at the small probe shape is timed no further (never at a model's big layers)
    monkeypatch.setattr(int8, "GIVE_UP_FACTOR", 0.0)
    times = MEASURE([(128, 256), (64, 96)], WORKING_KERNELS)
    assert all(row[k] is None for row in times.seconds.values() for k in WORKING_KERNELS)
    assert set(times.given_up) == set(WORKING_KERNELS)
    assert all("the probe shape" in why for why in times.given_up.values())
    refusal = int8.Int8Plan.from_times(times).refusal()
    assert refusal is not None and "not timed there" in refusal and "\n" not in refusal


def test_each_shape_gets_its_fastest_kernel_where_it_pays_and_fp32_elsewhere():
    times = int8.KernelTimes({"512x2048": {"fp32": 1e-3, "onednn": 0.7, "int_mm": 5e-4},
                              "512x512": {"fp32": 1e-3, "onednn": 6e-4, "int_mm": 8e-4},
                              "64x64": {"fp32": 1e-3, "onednn": 9.5e-4, "int_mm": 2e-3},  # 1.05x: not enough
                              "128x128": {"fp32": 1e-3, "onednn": None, "int_mm": None}})
    plan = int8.Int8Plan.from_times(times)
    assert plan.kernels == {"512x2048": "int_mm", "512x512": "onednn", "64x64": None, "128x128": None}
    assert plan.kernel_for(512, 2048) == "int_mm" and plan.refusal() is None


def test_the_kernel_measurement_is_cached_per_cpu_and_torch_version(tmp_path, monkeypatch):
    measure = fake_times(lambda shape: "int_mm")
    monkeypatch.setattr(int8, "time_kernels", measure)
    monkeypatch.setattr(int8, "_load_average", lambda: 0.0)
    assert int8.int8_plan([(32, 64), (64, 32)]).kernels == {"32x64": "int_mm", "64x32": "int_mm"}
    again = int8.int8_plan([(64, 32), (32, 64)])
    assert again.cached and again.kernels == {"32x64": "int_mm", "64x32": "int_mm"}
    assert len(measure.calls) == 1
    cache = json.loads((tmp_path / "cache" / "precision.json").read_text())
    (key, entry), = cache.items()
    assert f"torch {torch.__version__}" in key and f"threads {torch.get_num_threads()}" in key and "32x64" in key
    assert entry["kernels"] == {"32x64": "int_mm", "64x32": "int_mm"} and entry["seconds"]["32x64"]["fp32"] == 1e-3
    monkeypatch.setattr(torch, "__version__", "9.9.9")  # another torch: measured again
    int8.int8_plan([(32, 64), (64, 32)])
    assert len(measure.calls) == 2
    # measured on a busy machine: used, and measured again once the machine is quieter
    monkeypatch.setattr(torch, "__version__", "9.9.10")
    monkeypatch.setattr(int8, "_load_average", lambda: 100.0)
    int8.int8_plan([(32, 64)])
    int8.int8_plan([(32, 64)])
    assert len(measure.calls) == 3
    monkeypatch.setattr(int8, "_load_average", lambda: 0.0)
    int8.int8_plan([(32, 64)])
    int8.int8_plan([(32, 64)])
    assert len(measure.calls) == 4


@pytest.mark.parametrize("kernel", WORKING_KERNELS)
def test_the_kernel_measured_fastest_runs_every_layer(lstm_model, kernel, monkeypatch):
    monkeypatch.setattr(int8, "time_kernels", fake_times(lambda shape: kernel))
    fp32 = interlingua.load(lstm_model, "cpu")
    q = interlingua.load(lstm_model, "cpu", precision="int8")
    layers = [m for m in q._network.modules() if isinstance(m, Int8Linear)]
    assert layers and {m.kernel for m in layers} == {kernel}
    assert not any(type(m) is torch.nn.Linear for m in q._network.modules())
    assert isinstance(q._network.decoder_for("xb").lstm, LinearLSTM)
    sources = split_text(fp32.config.corpus)[0][:40]
    want, got = fp32.translate(sources, "xa", "xb"), q.translate(sources, "xa", "xb")
    assert sum(a == b for a, b in zip(want, got)) / len(sources) >= MIN_GREEDY_AGREEMENT


def test_layers_where_no_kernel_pays_stay_fp32_and_so_does_their_lstm(lstm_model, monkeypatch):
    fp32 = interlingua.load(lstm_model, "cpu")
    generator = fp32._network.decoder_for("xb").generator
    output_shape = int8.shape_label(generator.in_features, generator.out_features)
    monkeypatch.setattr(int8, "time_kernels", fake_times(lambda shape: "int_mm" if shape == output_shape else None))
    q = interlingua.load(lstm_model, "cpu", precision="int8")
    decoder = q._network.decoder_for("xb")
    assert isinstance(decoder.generator, Int8Linear) and decoder.generator.kernel == "int_mm"
    assert isinstance(decoder.lstm, torch.nn.LSTM)  # its gates do not pay: nn.LSTM's fused fp32 kernel is kept
    others = [m for m in q._network.modules() if isinstance(m, (torch.nn.Linear, Int8Linear)) and m is not
              decoder.generator and (m.in_features, m.out_features) != (generator.in_features, generator.out_features)]
    assert others and all(type(m) is torch.nn.Linear for m in others)
    sources = split_text(fp32.config.corpus)[0][:20]
    assert len(q.translate(sources, "xa", "xb")) == 20


def test_int8_is_refused_in_one_line_where_no_kernel_pays(trained, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(int8, "time_kernels", fake_times(lambda shape: None))
    with pytest.raises(ConfigError) as refused:
        interlingua.load(trained, "cpu", precision="int8")
    message = str(refused.value)
    assert "\n" not in message and message.startswith("int8 refused on this CPU")
    assert "torch._int_mm 2 ms (2.00x fp32's time)" in message and "fp32 1 ms" in message
    assert message.endswith("use fp32")
    (tmp_path / "in.xa").write_text("a b c\n")
    assert main(["translate", "--model", str(trained), "--src", "xa", "--tgt", "xb", "--device", "cpu",
                 "--precision", "int8", "-i", str(tmp_path / "in.xa"), "-o", str(tmp_path / "out.xb")]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {message}"]
    assert not (tmp_path / "out.xb").exists()


def test_auto_keeps_the_baseline_with_a_warning_where_no_kernel_pays(trained, monkeypatch, caplog):
    monkeypatch.setattr(int8, "time_kernels", fake_times(lambda shape: None))
    monkeypatch.setattr(int8_probe, "int8_speedup", lambda *a, **k: pytest.fail("the model timed in int8"))
    caplog.set_level("INFO")
    model = interlingua.load(trained, "cpu", precision="auto")
    assert model.runtime.precision in ("fp32", "bf16") and not int8.is_quantized(model._network)
    warned = [r for r in caplog.records if r.levelname == "WARNING" and "int8 refused on this CPU" in r.message]
    assert len(warned) == 1 and f"precision auto: {model.runtime.precision}, not int8" in warned[0].message


# --- whole models --------------------------------------------------------------------------------------


def test_int8_translates_and_embeds_as_fp32_does(trained):
    fp32 = interlingua.load(trained, "cpu")
    q = interlingua.load(trained, "cpu", precision="int8")
    assert q.runtime.precision == "int8" and fp32.runtime.precision == "fp32"
    assert any(isinstance(m, Int8Linear) for m in q._network.modules())
    assert q._network.decoder_for("xb").generator.__class__ is Int8Linear
    sources, references = split_text(fp32.config.corpus)
    for beam in (1, 4):
        want, got = fp32.translate(sources, "xa", "xb", beam=beam), q.translate(sources, "xa", "xb", beam=beam)
        same = sum(a == b for a, b in zip(want, got)) / len(sources)
        assert same >= MIN_GREEDY_AGREEMENT, (beam, same)
        assert token_accuracy(got, references) >= token_accuracy(want, references) - 0.05
    a, b = fp32.encode(sources[:50], "xa"), q.encode(sources[:50], "xa")
    assert b.dtype == np.float32 and a.shape == b.shape
    cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cosine.min() > 0.99


def test_a_sentence_translates_the_same_alone_and_in_a_batch(trained):
    q = interlingua.load(trained, "cpu", precision="int8")
    sources = split_text(q.config.corpus)[0][:24]
    for beam in (1, 3):
        batched = q.translate(sources, "xa", "xb", beam=beam)
        assert [q.translate([s], "xa", "xb", beam=beam)[0] for s in sources] == batched
    together = q.encode(sources, "xa")
    for i in (0, 7, 23):  # the int8 layers are exact per row; fp32 ones (nn.LSTM's kernel) round by batch, ~1e-7
        np.testing.assert_allclose(q.encode([sources[i]], "xa")[0], together[i], rtol=0, atol=1e-6)


def test_int8_through_the_command_line(trained, tmp_path, capsys):
    q = interlingua.load(trained, "cpu", precision="int8")
    sources = split_text(q.config.corpus)[0][:10]
    (tmp_path / "in.xa").write_text("\n".join(sources) + "\n")
    assert main(["translate", "--model", str(trained), "--src", "xa", "--tgt", "xb", "--device", "cpu",
                 "--precision", "int8", "-i", str(tmp_path / "in.xa"), "-o", str(tmp_path / "out.xb")]) == 0
    assert (tmp_path / "out.xb").read_text().splitlines() == q.translate(sources, "xa", "xb", beam=5)  # its default
    assert main(["embed", "--model", str(trained), "--lang", "xa", "--device", "cpu", "--precision", "int8",
                 "-i", str(tmp_path / "in.xa"), "-o", str(tmp_path / "v.npy")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), q.encode(sources, "xa"), atol=1e-6)
    capsys.readouterr()


def test_the_service_runs_an_int8_model(trained):
    import warnings
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
        from fastapi.testclient import TestClient

    from interlingua.serving.app import build_app
    q = interlingua.load(trained, "cpu", precision="int8")
    sources = split_text(q.config.corpus)[0][:5]
    with TestClient(build_app(q)) as client:
        response = client.post("/translate", json={"texts": sources, "src": "xa", "tgt": "xb", "beam": 2})
        assert response.status_code == 200, response.text
        assert response.json()["translations"] == q.translate(sources, "xa", "xb", beam=2)
        response = client.post("/embed", json={"texts": sources, "lang": "xa"})
        assert response.status_code == 200, response.text
        np.testing.assert_allclose(np.asarray(response.json()["vectors"], dtype=np.float32), q.encode(sources, "xa"),
                                   atol=1e-5)


# --- what int8 refuses -----------------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["cuda", "cuda:1", "mps"])
def test_int8_on_another_device_than_the_cpu_is_one_clear_error(device):
    with pytest.raises(ConfigError, match="int8 runs on the CPU only"):
        resolve_device_precision("int8", torch.device(device))
    assert resolve_device_precision("int8", torch.device("cpu")) == "int8"


def test_a_network_off_the_cpu_or_without_linear_layers_is_refused():
    with pytest.raises(ConfigError, match="CPU only; this model is on meta"):
        quantize_network(torch.nn.Sequential(torch.nn.Linear(4, 4)).to("meta"))
    with pytest.raises(ConfigError, match="has no linear layer"):
        quantize_network(torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.ReLU()))


def test_a_model_too_small_for_int8_to_pay_is_refused_by_name(trained, monkeypatch, capsys):
    monkeypatch.setattr(int8, "MIN_INT8_WEIGHTS", 10**9)
    with pytest.raises(ConfigError, match="no layer of this model is big enough for int8 to pay"):
        interlingua.load(trained, "cpu", precision="int8")
    assert main(["translate", "--model", str(trained), "--src", "xa", "--tgt", "xb", "--device", "cpu",
                 "--precision", "int8", "-i", "/dev/null"]) == 2
    assert "big enough for int8" in capsys.readouterr().err


def test_an_int8_model_refuses_to_be_saved_and_reloads_for_untrained_like(trained, tmp_path):
    q = interlingua.load(trained, "cpu", precision="int8")
    with pytest.raises(InterlinguaError, match="loaded in precision int8.*load it with precision fp32"):
        q.save(tmp_path / "folder")
    assert not (tmp_path / "folder").exists()
    fresh = q.untrained_like()
    assert fresh.runtime.precision == "int8" and any(isinstance(m, Int8Linear) for m in fresh._network.modules())
    with pytest.raises(InterlinguaError, match="cannot be re-initialised"):
        fresh.untrained_like()


def test_int8_runs_without_autocast():
    run = Runtime(torch.device("cpu"), "int8")
    with run.autocast():
        assert not torch.is_autocast_enabled("cpu")


def test_torchao_is_imported_only_for_int8_and_quietly():
    code = ("import sys, interlingua, interlingua.cli, interlingua.modules.int8 as q\n"
            "assert 'torchao' not in sys.modules, 'imported early'\n"
            "q._torchao_primitives()\n"
            "assert 'torchao' in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Failed to load" not in done.stderr and "Warning" not in done.stderr and not done.stderr.strip(), done.stderr


# --- precision auto ------------------------------------------------------------------------------------


def test_auto_decision_is_cached_and_gated_on_speed_and_dev_bleu(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERLINGUA_CACHE_DIR", str(tmp_path))
    calls: list[str] = []

    def speed(value: float):
        return lambda: calls.append("speed") or value

    def bleu(value):
        return lambda: calls.append("bleu") or value

    def fail():
        raise AssertionError("measured again despite the cache")

    # faster and BLEU within 0.3: int8, cached with its numbers; the next call reads the cache
    assert int8_probe.decide_int8("fp32", "model A", speed(2.0), bleu((30.0, 29.75, 200))) is True
    assert calls == ["speed", "bleu"]
    assert int8_probe.decide_int8("fp32", "model A", fail, fail) is True
    entry = next(v for k, v in json.loads((tmp_path / "precision.json").read_text()).items() if "model A" in k)
    assert entry["int8"] is True and entry["speedup"] == 2.0 and entry["dev_sentences"] == 200
    # faster but BLEU 0.31 lower: not int8 (cached too)
    assert int8_probe.decide_int8("fp32", "model B", speed(2.0), bleu((30.0, 29.69, 200))) is False
    assert int8_probe.decide_int8("fp32", "model B", fail, fail) is False
    # not faster: BLEU is never measured
    calls.clear()
    assert int8_probe.decide_int8("bf16", "model C", speed(1.05), bleu((30.0, 30.0, 200))) is False
    assert calls == ["speed"]
    # no dev set: never int8, nothing measured, and not cached (next time the dev set may be there)
    calls.clear()
    assert int8_probe.decide_int8("fp32", "model D", fail, fail, has_dev=lambda: False) is False
    assert int8_probe.decide_int8("fp32", "model D", speed(3.0), bleu((20.0, 20.0, 50))) is True
    assert calls == ["speed", "bleu"]
    # the baseline is part of what is cached: int8 against bf16 is another question than against fp32
    assert int8_probe.decide_int8("bf16", "model A", speed(0.9), fail) is False


def test_auto_measures_the_models_dev_bleu_and_picks_int8_where_it_holds(trained, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("INTERLINGUA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(int8_probe, "int8_speedup", lambda *a, **k: 5.0)  # a fake probe: int8 "5x faster"
    caplog.set_level("INFO")
    model = interlingua.load(trained, "cpu", precision="auto")
    entry = next(v for k, v in json.loads((tmp_path / "precision.json").read_text()).items() if "int8 vs" in k)
    assert entry["dev_sentences"] == 50  # the synthetic corpus's whole val split (fewer than DEV_SENTENCES)
    held = entry["int8_bleu"] >= entry["fp32_bleu"] - int8_probe.MAX_BLEU_DROP
    assert entry["int8"] is held
    assert model.runtime.precision == ("int8" if held else "fp32" if model.runtime.precision == "fp32" else "bf16")
    assert (model.runtime.precision == "int8") == any(isinstance(m, Int8Linear) for m in model._network.modules())
    sources = split_text(model.config.corpus)[0][:5]
    assert len(model.translate(sources, "xa", "xb")) == 5
    # cached: the next load neither probes nor translates the dev set
    monkeypatch.setattr(int8_probe, "int8_speedup", lambda *a, **k: pytest.fail("probed again"))
    monkeypatch.setattr(int8_probe, "dev_bleu", lambda *a, **k: pytest.fail("dev BLEU again"))
    assert interlingua.load(trained, "cpu", precision="auto").runtime.precision == model.runtime.precision


def test_auto_never_picks_int8_without_a_dev_set(trained, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("INTERLINGUA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(int8_probe, "int8_speedup", lambda *a, **k: 5.0)
    from interlingua.model_files.checkpoint import load_checkpoint
    loaded = load_checkpoint(trained)
    loaded.config.corpus = tmp_path / "gone" / "corpus.yaml"
    dev, why = int8_probe.dev_text(loaded)
    assert dev is None and "cannot be read" in why
    caplog.set_level("INFO")
    assert int8_probe.auto_int8(loaded, "fp32", "model gone") is None
    assert "no dev set to check its BLEU on" in caplog.text
    assert not any(isinstance(m, Int8Linear) for m in loaded.network.modules())  # the loaded network untouched
