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
import shutil
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
from torch import nn

import interlingua
from interlingua.cli import main
from interlingua.errors import ConfigError, InterlinguaError
from interlingua.inference import int8_probe
from interlingua.inference.representation import weights_fingerprint
from interlingua.model_files.load import load_model
from interlingua.modules import int8, kernel_timing, packed_linear
from interlingua.modules.int8 import Int8Linear, LinearLSTM, kernel_works, linear_lstms, quantize_network
from interlingua.modules.packed_linear import packed_kernel_works
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
            label = kernel_timing.shape_label(n_in, n_out)
            fastest = kernel_for(label)
            seconds[label] = {"fp32": 1e-3, **{k: 5e-4 if k == fastest else 2e-3 for k in kernels}}
        return kernel_timing.KernelTimes(seconds)

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


def int8_network(path: Path, model: interlingua.Model) -> torch.nn.Module:
    """The network `model` (`path` loaded in int8) translates with, to look at its layers: the checkpoint's,
    quantized as loading quantizes it; the same weights, names and dtypes included, as `model`'s."""
    network = load_model(path).network
    quantize_network(network)
    assert weights_fingerprint(network) == model.fingerprint
    return network


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
    loaded = load_model(lstm_model)
    fp32 = interlingua.Model(loaded)
    sources = split_text(fp32.config.corpus)[0][:40]
    before = fp32.translate(sources, "xa", "xb", beam=3)
    assert linear_lstms(loaded.network) == 1  # the network the model translates with, rewritten in place
    assert isinstance(loaded.network.decoder_for("xb").lstm, LinearLSTM)
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


@pytest.mark.parametrize("kernel", WORKING_KERNELS)
def test_the_rows_of_an_int8_layer_give_exactly_its_products_at_those_rows(kernel):
    """What a shortlist decodes with (`Int8Linear.rows`, made for every batch): the layer's own int8 products at the
    candidate rows, whichever kernel each runs, at any number of input rows; the bias and scales follow the rows."""
    torch.manual_seed(0)
    q = Int8Linear.from_linear(torch.nn.Linear(64, 300), kernel)
    for ids in (torch.tensor([0, 5, 17, 299]), torch.arange(0, 300, 3), torch.tensor([42])):
        part = q.rows(ids)
        assert (part.out_features, part.in_features) == (len(ids), 64)
        for n in (1, 3, 64):
            x = torch.randn(n, 64)
            with torch.inference_mode():
                assert torch.equal(part(x), q(x)[:, ids])


def test_a_shortlist_reads_the_int8_output_layer_as_dequantized_weights():
    from interlingua.modules.shortlist_decoding import output_layer_weights
    linear = torch.nn.Linear(16, 40)
    weight, bias = output_layer_weights(Int8Linear.from_linear(linear, WORKING_KERNELS[0]))
    assert weight.shape == (40, 16) and weight.dtype == torch.float32
    torch.testing.assert_close(weight, linear.weight.detach(), atol=2e-3, rtol=0)
    assert bias is not None and torch.equal(bias, linear.bias.detach())


def test_every_kernel_that_works_here_gives_the_same_products_for_the_same_input_levels():
    assert "int_mm" in WORKING_KERNELS  # torch._int_mm at least works anywhere
    torch.manual_seed(0)
    linear = torch.nn.Linear(40, 70)
    x = torch.randn(6, 40)
    for levels in sorted(set(int8.LEVELS.values())):
        kernels = [k for k in WORKING_KERNELS if int8.LEVELS[k] == levels]
        with torch.inference_mode():
            outs = [Int8Linear.from_linear(linear, k)(x) for k in kernels]
        for out in outs[1:]:
            torch.testing.assert_close(out, outs[0], atol=1e-6, rtol=1e-6)


@pytest.mark.skipif("fbgemm" not in WORKING_KERNELS, reason="fbgemm's int8 linear is not in this torch build")
def test_fbgemms_kernel_sums_7_bit_rows_exactly_whatever_the_batch_holds():
    """fbgemm quantizes a call's whole input with one scale; the pinning row makes that scale 1, so the integer rows
    pass through unchanged: exact sums at the extremes of the range, and a row's output the same in any batch."""
    torch.manual_seed(0)
    qweight = torch.randint(-127, 128, (50, 16), dtype=torch.int8)
    layer = Int8Linear(qweight, torch.ones(50) * 63, None, "fbgemm")  # weight scale 1 per input level
    x = torch.randint(-63, 64, (7, 16)).float()
    x[:, 0] = 63  # each row's largest input is 63: it quantizes to itself
    x[1] = 63
    x[2, 1:] = -63  # rows at the ends of the range: the largest sums
    want = 63 * (x.double() @ qweight.double().t())  # the sums, times the row scale max|x| / 63 = 1, times 63
    with torch.inference_mode():
        assert torch.equal(layer(x).double(), want)
        assert torch.equal(layer(x[2:3]).double(), want[2:3])
        assert torch.equal(layer(torch.zeros(3, 16)), torch.zeros(3, 50))  # all zeros: the pin still holds


def test_fbgemms_7_bit_kernel_runs_only_where_no_8_bit_kernel_pays():
    times = kernel_timing.KernelTimes({"512x2048": {"fp32": 1e-3, "int_mm": 8e-4, "fbgemm": 4e-4},
                                       "256x512": {"fp32": 1e-3, "int_mm": 2e-3, "fbgemm": 5e-4}})
    plan = int8.Int8Plan.from_times(times)  # int_mm pays at one shape: the model stays on 8-bit inputs
    assert plan.kernels == {"512x2048": "int_mm", "256x512": None}
    slow = kernel_timing.KernelTimes({"512x2048": {"fp32": 1e-3, "int_mm": 9e-3, "fbgemm": 4e-4},
                                      "256x512": {"fp32": 1e-3, "int_mm": None, "fbgemm": 9.5e-4}})
    plan = int8.Int8Plan.from_times(slow)  # no 8-bit kernel pays anywhere (a CPU without VNNI): fbgemm where it pays
    assert plan.kernels == {"512x2048": "fbgemm", "256x512": None} and plan.refusal() is None


def test_tied_output_layer_is_quantized_and_the_embedding_keeps_its_fp32_table(transformer_model):
    network = load_model(transformer_model).network
    decoder = network.decoder_for("xb")
    table = decoder.embedding.embed.weight
    assert decoder.generator.weight is table
    before = table.detach().clone()
    assert quantize_network(network) > 0
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
    monkeypatch.setattr(int8, "PROBE_GIVE_UP_FACTOR", 0.0)
    times = MEASURE([(128, 256), (64, 96)], WORKING_KERNELS)
    assert all(row[k] is None for row in times.seconds.values() for k in WORKING_KERNELS)
    assert set(times.given_up) == set(WORKING_KERNELS)
    assert all("the probe shape" in why for why in times.given_up.values())
    refusal = int8.Int8Plan.from_times(times).refusal()
    assert refusal is not None and "not timed there" in refusal and "\n" not in refusal


@pytest.mark.parametrize("probe_ratio", [12.0, 60.0])
def test_a_kernel_slow_only_at_the_probe_shape_is_still_timed_at_the_models_shapes(monkeypatch, probe_ratio):
    """A fixed cost per call makes a kernel several times slower than fp32 at the tiny probe shape and faster at a
    model's big layers (oneDNN's qlinear on an Intel Xeon with AMX: 3-12x at the probe, 1.8-2.6x faster than
    torch._int_mm at 512x8000): it is timed there unless the probe finds it PROBE_GIVE_UP_FACTOR x slower."""
    def fake_time_block(fn, x, calls):  # seconds a call: fp32 1e-5; int8 probe_ratio x that at the probe, else 0.5x
        if isinstance(fn, nn.Linear):
            return 1e-5
        return probe_ratio * 1e-5 if x.size(1) == int8._PROBE[1] else 0.5e-5

    monkeypatch.setattr(kernel_timing, "time_block", fake_time_block)
    times = MEASURE([(512, 2048)], WORKING_KERNELS)
    plan = int8.Int8Plan.from_times(times)
    if probe_ratio < int8.PROBE_GIVE_UP_FACTOR:
        assert not times.given_up and plan.kernel_for(512, 2048) in WORKING_KERNELS
        assert all(times.seconds["512x2048"][k] < times.seconds["512x2048"]["fp32"] for k in WORKING_KERNELS)
    else:
        assert set(times.given_up) == set(WORKING_KERNELS) and plan.kernel_for(512, 2048) is None
        assert all("the probe shape" in why for why in times.given_up.values())


def test_each_shape_gets_its_fastest_kernel_where_it_pays_and_fp32_elsewhere():
    times = kernel_timing.KernelTimes({"512x2048": {"fp32": 1e-3, "onednn": 0.7, "int_mm": 5e-4},
                              "512x512": {"fp32": 1e-3, "onednn": 6e-4, "int_mm": 8e-4},
                              "64x64": {"fp32": 1e-3, "onednn": 9.5e-4, "int_mm": 2e-3},  # 1.05x: not enough
                              "128x128": {"fp32": 1e-3, "onednn": None, "int_mm": None}})
    plan = int8.Int8Plan.from_times(times)
    assert plan.kernels == {"512x2048": "int_mm", "512x512": "onednn", "64x64": None, "128x128": None}
    assert plan.kernel_for(512, 2048) == "int_mm" and plan.refusal() is None


def test_the_kernel_measurement_is_cached_per_cpu_and_torch_version(tmp_path, monkeypatch):
    measure = fake_times(lambda shape: "int_mm")
    monkeypatch.setattr(int8, "time_kernels", measure)
    monkeypatch.setattr(kernel_timing, "load_average", lambda: 0.0)
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
    monkeypatch.setattr(kernel_timing, "load_average", lambda: 100.0)
    int8.int8_plan([(32, 64)])
    int8.int8_plan([(32, 64)])
    assert len(measure.calls) == 3
    monkeypatch.setattr(kernel_timing, "load_average", lambda: 0.0)
    int8.int8_plan([(32, 64)])
    int8.int8_plan([(32, 64)])
    assert len(measure.calls) == 4


@pytest.mark.parametrize("kernel", WORKING_KERNELS)
def test_the_kernel_measured_fastest_runs_every_layer(lstm_model, kernel, monkeypatch):
    monkeypatch.setattr(int8, "time_kernels", fake_times(lambda shape: kernel))
    fp32 = interlingua.load(lstm_model, "cpu")
    q = interlingua.load(lstm_model, "cpu", precision="int8")
    network = int8_network(lstm_model, q)
    layers = [m for m in network.modules() if isinstance(m, Int8Linear)]
    assert layers and {m.kernel for m in layers} == {kernel}
    assert not any(type(m) is torch.nn.Linear for m in network.modules())
    assert isinstance(network.decoder_for("xb").lstm, LinearLSTM)
    sources = split_text(fp32.config.corpus)[0][:40]
    want, got = fp32.translate(sources, "xa", "xb"), q.translate(sources, "xa", "xb")
    assert sum(a == b for a, b in zip(want, got)) / len(sources) >= MIN_GREEDY_AGREEMENT


def test_layers_where_no_kernel_pays_stay_fp32_and_so_does_their_lstm(lstm_model, monkeypatch):
    fp32 = interlingua.load(lstm_model, "cpu")
    generator = load_model(lstm_model).network.decoder_for("xb").generator
    output_shape = kernel_timing.shape_label(generator.in_features, generator.out_features)
    monkeypatch.setattr(int8, "time_kernels", fake_times(lambda shape: "int_mm" if shape == output_shape else None))
    q = interlingua.load(lstm_model, "cpu", precision="int8")
    network = int8_network(lstm_model, q)
    decoder = network.decoder_for("xb")
    assert isinstance(decoder.generator, Int8Linear) and decoder.generator.kernel == "int_mm"
    assert isinstance(decoder.lstm, torch.nn.LSTM)  # its gates do not pay: nn.LSTM's fused fp32 kernel is kept
    others = [m for m in network.modules() if isinstance(m, (torch.nn.Linear, Int8Linear)) and m is not
              decoder.generator and (m.in_features, m.out_features) != (generator.in_features, generator.out_features)]
    assert others and all(isinstance(m, torch.nn.Linear) for m in others)  # none became an Int8Linear
    sources = split_text(fp32.config.corpus)[0][:20]
    assert len(q.translate(sources, "xa", "xb")) == 20


def _packed_product_speedup(monkeypatch, tmp_path, speedup: float) -> None:
    """oneDNN's packed fp32 output layer `speedup` times as fast as nn.Linear at every row count and size (a stand-in
    for `packed_linear.time_packed`), measured afresh into a cache of its own."""
    monkeypatch.setattr(packed_linear, "MIN_PACKED_WEIGHTS", 0)
    monkeypatch.setattr(kernel_timing, "load_average", lambda: 0.0)
    monkeypatch.setenv("INTERLINGUA_CACHE_DIR", str(tmp_path / f"cache_{speedup}"))
    monkeypatch.setattr(packed_linear, "time_packed", lambda n_in, n_out, rows=packed_linear.PACKED_ROWS: (
        kernel_timing.KernelTimes({packed_linear.rows_label(n_in, n_out, r): {"fp32": 1e-3, packed_linear.PACKED:
                                                                               1e-3 / speedup} for r in rows})))


@pytest.mark.skipif(not packed_kernel_works(), reason="oneDNN's packed fp32 linear is not available here")
def test_an_output_layer_as_fast_in_fp32_packed_stays_fp32_and_packed(lstm_model, tmp_path, monkeypatch):
    """int8 is measured against nn.Linear; fp32 decoding runs an output layer as oneDNN's packed product, so that
    is what int8 has to beat there (the fixture's int8: 2x nn.Linear's speed at every shape)."""
    _packed_product_speedup(monkeypatch, tmp_path, 4.0)
    q = interlingua.load(lstm_model, "cpu", precision="int8")
    network = int8_network(lstm_model, q)
    generator = network.decoder_for("xb").generator
    assert isinstance(generator, torch.nn.Linear) and not isinstance(generator, Int8Linear)  # left to fp32 ...
    assert q.output_kernel == "packed"  # ... which the int8 model runs packed
    assert any(isinstance(m, Int8Linear) for m in network.modules())  # every other layer that pays: int8
    _packed_product_speedup(monkeypatch, tmp_path, 1.0)  # packing pays nothing here: int8 as before
    q = interlingua.load(lstm_model, "cpu", precision="int8")
    assert isinstance(int8_network(lstm_model, q).decoder_for("xb").generator, Int8Linear)
    assert q.output_kernel == "default"


def test_int8_is_refused_where_it_pays_only_at_an_output_layer_fp32_runs_packed(lstm_model, tmp_path, monkeypatch):
    generator = load_model(lstm_model).network.decoder_for("xb").generator
    output_shape = kernel_timing.shape_label(generator.in_features, generator.out_features)
    monkeypatch.setattr(int8, "time_kernels", fake_times(lambda shape: "int_mm" if shape == output_shape else None))
    _packed_product_speedup(monkeypatch, tmp_path, 4.0)
    with pytest.raises(ConfigError, match="the only layers where an int8 kernel pays over nn.Linear are output "
                                          "layers, and fp32 runs them as oneDNN's packed product"):
        interlingua.load(lstm_model, "cpu", precision="int8")


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


def test_auto_keeps_the_baseline_with_a_warning_where_no_kernel_pays(trained, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(int8, "time_kernels", fake_times(lambda shape: None))
    monkeypatch.setattr(int8_probe, "int8_speedup", lambda *a, **k: pytest.fail("the model timed in int8"))
    path = recorded(trained, tmp_path, holds=True)  # checked elsewhere, where a kernel paid
    caplog.set_level("INFO")
    model = interlingua.load(path, "cpu", precision="auto")
    assert model.runtime.precision in ("fp32", "bf16")
    assert model.fingerprint == interlingua.load(path, "cpu").fingerprint  # the fp32 weights, not quantized
    warned = [r for r in caplog.records if r.levelname == "WARNING" and "int8 refused on this CPU" in r.message]
    assert len(warned) == 1 and f"precision auto: {model.runtime.precision}, not int8" in warned[0].message


# --- whole models --------------------------------------------------------------------------------------


def test_int8_translates_and_embeds_as_fp32_does(trained):
    fp32 = interlingua.load(trained, "cpu")
    q = interlingua.load(trained, "cpu", precision="int8")
    assert q.runtime.precision == "int8" and fp32.runtime.precision == "fp32"
    network = int8_network(trained, q)
    assert any(isinstance(m, Int8Linear) for m in network.modules())
    assert network.decoder_for("xb").generator.__class__ is Int8Linear
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
    assert fresh.runtime.precision == "int8"
    with pytest.raises(InterlinguaError, match="loaded in precision int8"):  # its weights are int8 again
        fresh.save(tmp_path / "fresh")
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


# --- int8's check, and precision auto ------------------------------------------------------------------


def copied(checkpoint: Path, folder: Path) -> Path:
    """A copy of the session's checkpoint in `folder`, to record a check beside (the session's stays bare)."""
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copyfile(checkpoint, folder / "model.pt"))


def recorded(checkpoint: Path, folder: Path, holds: bool, weights: str | None = None) -> Path:
    """A copy of `checkpoint` with an int8 check beside it that says `holds`, for its own weights or for those
    `weights` names."""
    path = copied(checkpoint, folder)
    weights = weights or interlingua.load(path, "cpu").fingerprint
    int8_probe.Int8Check(holds=holds, fp32_bleu=30.0, int8_bleu=29.9 if holds else 29.0, dev_sentences=50,
                         corpus="corpus.yaml", weights=weights).write(int8_probe.check_path(path))
    return path


@pytest.fixture
def no_corpus(monkeypatch):
    """Any read of a corpus fails the test (loading a model reads none)."""
    from interlingua.data import corpus
    for name in ("load_corpus", "read_group", "read_lines", "stream_group"):
        monkeypatch.setattr(corpus, name, lambda *a, _name=name, **k: pytest.fail(f"a corpus was read ({_name})"))


def test_the_check_measures_both_dev_bleus_and_records_them_beside_the_model(trained, tmp_path, capsys):
    path = copied(trained, tmp_path)
    check = int8_probe.check_int8(path)
    assert check.dev_sentences == 50  # the synthetic corpus's whole val split (fewer than DEV_SENTENCES)
    assert check.holds is (check.int8_bleu >= check.fp32_bleu - int8_probe.MAX_BLEU_DROP)
    assert check.weights == interlingua.load(path, "cpu").fingerprint
    assert int8_probe.check_path(path) == tmp_path / "model.int8.json"
    record = json.loads((tmp_path / "model.int8.json").read_text())
    assert record["holds"] is check.holds and record["fp32_bleu"] == check.fp32_bleu and record["measured"]
    assert int8_probe.Int8Check.read(tmp_path / "model.int8.json") == check
    # the command line: the same check, and what `auto` does with it
    assert main(["check-int8", str(path), "--sentences", "10"]) == 0
    out = capsys.readouterr().out
    assert "on 10 sentences (may be at most 0.3 lower)" in out and f"recorded in {tmp_path / 'model.int8.json'}" in out
    assert ("int8 holds: `--precision auto` picks int8 where it also decodes faster" in out) is \
        int8_probe.Int8Check.read(tmp_path / "model.int8.json").holds


def test_a_check_on_a_handful_of_dev_sentences_says_it_says_little(trained, synthetic_corpus, tmp_path, caplog):
    """A corpus whose val split holds 4 pairs of the model's directions: the check is made and recorded, with a
    warning (it used to say "int8 holds" from 4 sentences without a word)."""
    from conftest import write_multiway_corpus

    from interlingua.data.corpus import load_corpus, read_group
    path = copied(trained, tmp_path)
    lines = {lang: text[:4] for lang, text in read_group(load_corpus(synthetic_corpus).groups("val")[0]).items()}
    small = write_multiway_corpus(tmp_path, "small", {"train": lines, "val": lines})
    with caplog.at_level("WARNING", logger="interlingua.inference.int8_probe"):
        check = int8_probe.check_int8(path, corpus=small)
    assert check.dev_sentences == 4 and "only 4 dev sentence pair(s)" in caplog.text and "says little" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="interlingua.inference.int8_probe"):
        int8_probe.check_int8(path, limit=4)  # as few as asked for: no warning
    assert "says little" not in caplog.text


def test_the_check_without_a_dev_set_is_one_error_and_records_nothing(trained, tmp_path, capsys):
    path = copied(trained, tmp_path)
    gone = tmp_path / "gone" / "corpus.yaml"
    with pytest.raises(InterlinguaError, match="no dev set to check int8's BLEU on: its corpus cannot be read"):
        int8_probe.check_int8(path, corpus=gone)
    assert main(["check-int8", str(path), "--corpus", str(gone)]) == 2
    assert capsys.readouterr().err.startswith("error: no dev set to check int8's BLEU on")
    assert not int8_probe.check_path(path).exists()


def test_auto_reads_no_corpus_and_without_a_check_never_picks_int8(trained, tmp_path, monkeypatch, no_corpus, caplog,
                                                                     capsys):
    monkeypatch.setattr(int8_probe, "int8_speedup", lambda *a, **k: pytest.fail("int8 timed without a check"))
    path = copied(trained, tmp_path)
    caplog.set_level("INFO")
    model = interlingua.load(path, "cpu", precision="auto")
    assert model.runtime.precision in ("fp32", "bf16")
    assert f"no int8 check recorded for this model ({tmp_path / 'model.int8.json'})" in caplog.text
    assert "`interlingua check-int8 MODEL` measures int8's dev BLEU once" in caplog.text
    (tmp_path / "in.xa").write_text("a b c\n")
    assert main(["translate", "--model", str(path), "--src", "xa", "--tgt", "xb", "--device", "cpu",
                 "--precision", "auto", "-i", str(tmp_path / "in.xa"), "-o", str(tmp_path / "out.xb")]) == 0
    assert len((tmp_path / "out.xb").read_text().splitlines()) == 1
    capsys.readouterr()


def test_auto_picks_int8_where_the_check_holds_and_it_decodes_faster(trained, tmp_path, monkeypatch, no_corpus,
                                                                     caplog):
    monkeypatch.setattr(int8_probe, "int8_speedup", lambda *a, **k: 5.0)  # a fake probe: int8 "5x faster"
    path = recorded(trained, tmp_path, holds=True)
    caplog.set_level("INFO")
    model = interlingua.load(path, "cpu", precision="auto")
    assert model.runtime.precision == "int8" and "its check found dev BLEU int8 29.90 vs fp32 30.00" in caplog.text
    int8_network(path, model)  # the model translates with the int8 network
    assert len(model.translate(split_text(model.config.corpus)[0][:5], "xa", "xb")) == 5
    # the speed-up is cached per machine: the next load times nothing
    monkeypatch.setattr(int8_probe, "int8_speedup", lambda *a, **k: pytest.fail("timed again"))
    assert interlingua.load(path, "cpu", precision="auto").runtime.precision == "int8"
    # the same machine with another kernel plan (its kernels measured again): the speed-up is measured again
    monkeypatch.setattr(int8.Int8Plan, "describe", lambda self: "512x8000=int_mm")
    monkeypatch.setattr(int8_probe, "int8_speedup", lambda *a, **k: 1.05)
    assert interlingua.load(path, "cpu", precision="auto").runtime.precision in ("fp32", "bf16")
    # on a machine where int8 is not faster (another cache): the baseline
    monkeypatch.setenv("INTERLINGUA_CACHE_DIR", str(tmp_path / "other"))
    monkeypatch.setattr(int8_probe, "int8_speedup", lambda *a, **k: 1.05)
    assert interlingua.load(path, "cpu", precision="auto").runtime.precision in ("fp32", "bf16")
    assert "int8 decoding 1.05x the speed" in caplog.text


def test_auto_keeps_the_baseline_where_the_check_failed_or_is_not_this_models(trained, tmp_path, monkeypatch,
                                                                              no_corpus, caplog):
    monkeypatch.setattr(int8_probe, "int8_speedup", lambda *a, **k: pytest.fail("int8 timed"))
    caplog.set_level("INFO")
    failed = recorded(trained, tmp_path / "failed", holds=False)
    assert interlingua.load(failed, "cpu", precision="auto").runtime.precision in ("fp32", "bf16")
    assert "not int8: its check found dev BLEU int8 29.00 vs fp32 30.00" in caplog.text
    other = recorded(trained, tmp_path / "other", holds=True, weights="0" * 64)  # weights trained on since
    assert interlingua.load(other, "cpu", precision="auto").runtime.precision in ("fp32", "bf16")
    assert "model.int8.json was measured on other weights than these" in caplog.text
    broken = copied(trained, tmp_path / "broken")
    int8_probe.check_path(broken).write_text("{")
    assert interlingua.load(broken, "cpu", precision="auto").runtime.precision in ("fp32", "bf16")
    assert "model.int8.json cannot be read" in caplog.text


def test_the_int8_cells_tanh_is_tanh_to_the_last_bits():
    """The int8 LSTM cell computes tanh as 2 sigmoid(2x) - 1 (torch.tanh ran at a ninth of sigmoid's speed on an AMD
    EPYC): the same function, over the range an LSTM sees and beyond, to float32's last bits."""
    from interlingua.modules.activations import tanh_by_sigmoid
    x = torch.cat([torch.linspace(-60, 60, 20001), torch.randn(10000), torch.tensor([0.0, -0.0, 1e-8, -1e-8])])
    assert (tanh_by_sigmoid(x) - torch.tanh(x)).abs().max().item() < 5e-7
    assert tanh_by_sigmoid(torch.tensor([-60.0, 60.0])).tolist() == [-1.0, 1.0]
