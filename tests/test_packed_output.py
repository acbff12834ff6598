"""The fp32 output layer through oneDNN's prepacked linear (`interlingua.modules.packed_linear`): the plan measured
per row count and cached, the same log-probabilities and translations either way, tied embeddings, the
restricted output rows and the shortlist with a packed layer, training untouched, and a quiet fallback where
the kernel is missing.

The models are the session's tiny ones of the synthetic task (`tests/conftest.py`: `kind_models`): their output
layers are far below `MIN_PACKED_WEIGHTS`, so the tests force packing (`INTERLINGUA_OUTPUT_KERNEL=packed`) or
lower the threshold with a stand-in measurement (`fake_times`); each test has its own cache of measurements.
"""
from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

import interlingua
from interlingua.data.shortlist import DirectionTable, Shortlist
from interlingua.errors import ConfigError
from interlingua.model_files.load import load_model
from interlingua.modules import kernel_timing, packed_linear
from interlingua.modules.outputs import RestrictedDecoder
from interlingua.modules.packed_linear import PackedLinear, PackedPlan, pack_output_layers, packed_kernel_works
from interlingua.modules.search import beam_search, greedy_search

KINDS = {"lstm": "bilstm-attention-lstm", "transformer": "transformer-none-transformer_tied"}
"""The two models, by their names in the session's `KINDS`."""

needs_kernel = pytest.mark.skipif(not packed_kernel_works(), reason="oneDNN's packed fp32 linear is not available here")


def fake_times(packed_faster: Callable[[int], float | None]) -> Callable:
    """A stand-in for `packed_linear.time_packed`: nn.Linear takes 1 ms at every row count, the packed product
    1 ms / `packed_faster(rows)` (None: not timed). Its `calls` list the shapes measured."""
    calls: list[tuple[int, int]] = []

    def measure(n_in, n_out, rows=packed_linear.PACKED_ROWS):
        calls.append((n_in, n_out))
        seconds = {}
        for r in rows:
            speedup = packed_faster(r)
            seconds[packed_linear.rows_label(n_in, n_out, r)] = {
                "fp32": 1e-3, packed_linear.PACKED: None if speedup is None else 1e-3 / speedup}
        return kernel_timing.KernelTimes(seconds)

    measure.calls = calls  # type: ignore[attr-defined]
    return measure


@pytest.fixture(autouse=True)
def own_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("INTERLINGUA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("INTERLINGUA_OUTPUT_KERNEL", raising=False)
    monkeypatch.setattr(kernel_timing, "load_average", lambda: 0.0)  # a quiet machine: measurements are kept


@pytest.fixture(scope="module", params=sorted(KINDS))
def trained(request, kind_models) -> Path:
    """Each kind's checkpoint in turn."""
    return kind_models[KINDS[request.param]].checkpoint


def sources_of(path: Path, n: int = 60) -> list[str]:
    corpus = interlingua.load(path, "cpu").config.corpus
    return (corpus.parent / "test.xa").read_text().splitlines()[:n]




def loaded_as(path: Path, kernel: str, monkeypatch) -> interlingua.Model:
    monkeypatch.setenv("INTERLINGUA_OUTPUT_KERNEL", kernel)
    model = interlingua.load(path, "cpu")
    monkeypatch.delenv("INTERLINGUA_OUTPUT_KERNEL")
    return model


# --- the plan -------------------------------------------------------------------------------------------


def test_the_plan_packs_the_row_counts_measured_faster_and_no_others(monkeypatch, tmp_path):
    measure = fake_times({1: 1.05, 8: 1.6, 64: 1.3, 320: 0.8}.get)  # 1.05x: under MIN_PACKED_SPEEDUP
    monkeypatch.setattr(packed_linear, "time_packed", measure)
    plan = packed_linear.packed_plan(128, 8000)
    assert plan.rows == packed_linear.PACKED_ROWS and plan.packed == (False, True, True, False)
    assert plan.pays and not plan.cached
    # a call takes the decision of the nearest measured row count on a log scale
    assert [plan.packed_for(n) for n in (1, 2, 3, 5, 20, 64, 143, 144, 200, 320, 5000)] == \
        [False, False, True, True, True, True, True, False, False, False, False]
    assert plan.describe() == "packed at 8, 64 rows, nn.Linear at 1, 320"
    again = packed_linear.packed_plan(128, 8000)
    assert again.cached and again.packed == plan.packed and len(measure.calls) == 1
    (key, entry), = json.loads((tmp_path / "cache" / "precision.json").read_text()).items()
    assert f"torch {torch.__version__}" in key and f"threads {torch.get_num_threads()}" in key and "128x8000" in key
    assert entry["seconds"]["128x8000 at 8 rows"]["fp32"] == 1e-3 and entry["packed"] == plan.describe()
    packed_linear.packed_plan(128, 4000)  # another shape: measured on its own
    assert measure.calls == [(128, 8000), (128, 4000)]
    monkeypatch.setattr(torch, "__version__", "9.9.9")  # another torch: measured again
    packed_linear.packed_plan(128, 8000)
    assert len(measure.calls) == 3
    # measured on a busy machine: used, and measured again once the machine is quieter
    monkeypatch.setattr(kernel_timing, "load_average", lambda: 100.0)
    packed_linear.packed_plan(64, 8000)
    packed_linear.packed_plan(64, 8000)
    assert len(measure.calls) == 4
    monkeypatch.setattr(kernel_timing, "load_average", lambda: 0.0)
    packed_linear.packed_plan(64, 8000)
    packed_linear.packed_plan(64, 8000)
    assert len(measure.calls) == 5


def test_nowhere_faster_means_no_packing(monkeypatch):
    monkeypatch.setattr(packed_linear, "time_packed", fake_times({1: 0.5, 8: 1.0, 64: 1.09, 320: None}.get))
    plan = packed_linear.packed_plan(128, 8000)
    assert not plan.pays and not any(plan.packed_for(n) for n in (1, 8, 64, 320))


@needs_kernel
def test_the_real_measurement_is_bounded_and_times_both_products():
    times = packed_linear.time_packed(64, 300, rows=(1, 16))
    assert set(times.seconds) == {"64x300 at 1 rows", "64x300 at 16 rows"}
    assert all(row["fp32"] > 0 and row[packed_linear.PACKED] > 0 for row in times.seconds.values())


# --- the layer ------------------------------------------------------------------------------------------


@needs_kernel
def test_a_packed_layer_computes_nn_linears_products_and_keeps_its_parameters():
    torch.manual_seed(0)
    linear = torch.nn.Linear(48, 300).eval()
    packed = PackedLinear(linear, PackedPlan.always())
    assert packed.weight is linear.weight and packed.bias is linear.bias
    assert packed.state_dict().keys() == linear.state_dict().keys()
    with torch.inference_mode():
        for rows in (1, 3, 64, 320):
            x = torch.randn(rows, 48)
            assert packed.uses_packed(x)
            torch.testing.assert_close(packed(x), linear(x), atol=1e-5, rtol=1e-5)
        x = torch.randn(4, 5, 48)  # any leading shape
        torch.testing.assert_close(packed(x), linear(x), atol=1e-5, rtol=1e-5)
        with torch.no_grad():
            linear.weight.mul_(-2)  # changed in place: packed again
        torch.testing.assert_close(packed(x), linear(x), atol=1e-5, rtol=1e-5)
    twin = copy.deepcopy(packed)  # oneDNN's tensor is not copied: packed again on first use
    with torch.inference_mode():
        torch.testing.assert_close(twin(x), linear(x), atol=1e-5, rtol=1e-5)


@needs_kernel
def test_training_never_runs_the_packed_product():
    torch.manual_seed(0)
    linear = torch.nn.Linear(16, 40)
    packed = PackedLinear(linear, PackedPlan.always())
    x = torch.randn(8, 16)
    assert packed.training and not packed.uses_packed(x)
    packed.eval()
    assert not packed.uses_packed(x)  # gradients wanted: nn.Linear's product
    packed(x).square().sum().backward()
    assert linear.weight.grad is not None and linear.bias.grad is not None
    with torch.no_grad():
        assert packed.uses_packed(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert not packed.uses_packed(x)
    with torch.inference_mode():
        assert not packed.uses_packed(x.double())
        assert not PackedLinear(linear, PackedPlan((8,), (False,))).uses_packed(x)  # a row count it does not pay at


# --- whole models ---------------------------------------------------------------------------------------


@needs_kernel
def test_forcing_either_product_gives_the_same_log_probabilities_and_translations(trained, monkeypatch):
    network = load_model(trained).network
    packed = load_model(trained).network
    assert pack_output_layers(packed, "packed") == 1
    lang = network.decoder_langs[0]
    layer = packed.decoder_for(lang).generator
    assert isinstance(layer, PackedLinear)
    torch.manual_seed(0)
    with torch.inference_mode():
        for rows in (1, 7, 64, 320):
            states = torch.randn(rows, layer.in_features)
            want = torch.log_softmax(network.decoder_for(lang).generator(states).float(), dim=-1)
            got = torch.log_softmax(layer(states).float(), dim=-1)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    plain, fast = loaded_as(trained, "default", monkeypatch), loaded_as(trained, "packed", monkeypatch)
    assert (plain.output_kernel, fast.output_kernel) == ("default", "packed")
    assert fast.fingerprint == plain.fingerprint  # the same weights, names and dtypes
    sources = sources_of(trained)
    for beam in (1, 5):
        assert fast.translate(sources, "xa", "xb", beam=beam) == plain.translate(sources, "xa", "xb", beam=beam)


@needs_kernel
def test_a_tied_embedding_stays_tied_and_untouched(kind_models, monkeypatch):
    path = kind_models[KINDS["transformer"]].checkpoint
    network = load_model(path).network
    decoder = network.decoder_for(network.decoder_langs[0])
    table = decoder.embedding.embed.weight
    before = table.detach().clone()
    assert decoder.generator.weight is table
    pack_output_layers(network, "packed")
    assert isinstance(decoder.generator, PackedLinear) and decoder.generator.weight is table
    with torch.inference_mode():
        decoder.generator(torch.randn(3, table.size(1)))
    assert torch.equal(table, before)
    assert pack_output_layers(network, "packed") == 0  # packed already


def test_the_measured_plan_decides_at_load(kind_models, monkeypatch, tmp_path):
    path = kind_models[KINDS["transformer"]].checkpoint
    assert interlingua.load(path, "cpu").output_kernel == "default"  # a tiny layer: not even timed
    monkeypatch.setattr(packed_linear, "time_packed", lambda *a, **k: pytest.fail("a tiny layer timed"))
    assert interlingua.load(path, "cpu").output_kernel == "default"
    monkeypatch.setattr(packed_linear, "MIN_PACKED_WEIGHTS", 0)
    if packed_kernel_works():
        monkeypatch.setattr(packed_linear, "time_packed", fake_times(lambda rows: 2.0 if rows >= 64 else 0.9))
        assert interlingua.load(path, "cpu").output_kernel == "packed"
    monkeypatch.setenv("INTERLINGUA_CACHE_DIR", str(tmp_path / "another machine"))
    monkeypatch.setattr(packed_linear, "time_packed", fake_times(lambda rows: 1.0))
    assert interlingua.load(path, "cpu").output_kernel == "default"  # measured no faster
    monkeypatch.setattr(packed_linear, "time_packed", lambda *a, **k: pytest.fail("timed with the kernel off"))
    assert loaded_as(path, "default", monkeypatch).output_kernel == "default"
    assert interlingua.load(path, "cpu", precision="bf16").output_kernel == "default"  # fp32 only
    monkeypatch.setenv("INTERLINGUA_OUTPUT_KERNEL", "fastest")
    with pytest.raises(ConfigError, match="INTERLINGUA_OUTPUT_KERNEL='fastest': use one of auto, default, packed"):
        interlingua.load(path, "cpu")


@needs_kernel
def test_restricted_output_rows_read_a_packed_layer(kind_models):
    path = kind_models[KINDS["transformer"]].checkpoint
    plain, packed = load_model(path).network.eval(), load_model(path).network.eval()
    pack_output_layers(packed, "packed")  # packed first, then restricted (as `interlingua extend` would)
    lang = packed.decoder_langs[-1]
    size = packed.decoder_for(lang).generator.out_features
    for network in (plain, packed):
        network.restrict_outputs({lang: [(0, size - 5)]})
    torch.manual_seed(0)
    src, lengths = torch.randint(5, size, (6, 7)), torch.tensor([7, 7, 6, 5, 3, 2])
    got = {}
    with torch.inference_mode():
        for name, network in (("plain", plain), ("packed", packed)):
            bridged = network.run_encoder(src, lengths, network.encoder_langs[0])
            decoder, state = network.start_decoding(bridged, lang)
            assert isinstance(decoder, RestrictedDecoder)
            logp, _ = decoder.step(torch.full((6,), 2), state)
            assert torch.isinf(logp[:, size - 5:]).all()
            got[name] = (logp, greedy_search(decoder, state, 12), beam_search(decoder, state, 12, 4))
    assert isinstance(packed.decoder_for(lang).generator, PackedLinear)
    assert torch.equal(got["packed"][0], got["plain"][0]) and got["packed"][1:] == got["plain"][1:]
    fresh = load_model(path).network
    fresh.restrict_outputs({lang: [(0, size - 5)]})
    assert pack_output_layers(fresh, "packed") == 0  # rows read per language: left as they are


@needs_kernel
def test_the_shortlist_decodes_with_a_packed_output_layer(trained, monkeypatch):
    plain, fast = loaded_as(trained, "default", monkeypatch), loaded_as(trained, "packed", monkeypatch)
    size = len(plain.vocabs["xb"])
    rng = np.random.default_rng(0)
    table = np.stack([rng.choice(size, 12, replace=False) for _ in range(len(plain.vocabs["xa"]))]).astype(np.int32)
    shortlist = Shortlist({("xa", "xb"): DirectionTable(table, np.arange(8, dtype=np.int32))}, 12, 8)
    sources = sources_of(trained, 30)
    for beam in (1, 4):
        want = plain.use_shortlist(shortlist).translate(sources, "xa", "xb", beam=beam)
        assert fast.use_shortlist(shortlist).translate(sources, "xa", "xb", beam=beam) == want


@pytest.mark.parametrize("missing", ["no oneDNN", "not x86"])
def test_without_the_kernel_the_layers_stay_as_they_are_quietly(kind_models, monkeypatch, caplog, missing):
    if missing == "no oneDNN":
        monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    else:
        monkeypatch.setattr(packed_linear.platform, "machine", lambda: "aarch64")
    packed_kernel_works.cache_clear()
    try:
        path = kind_models[KINDS["lstm"]].checkpoint
        caplog.set_level(logging.INFO)
        model = loaded_as(path, "packed", monkeypatch)
        assert model.output_kernel == "default"
        assert len(model.translate(sources_of(path, 5), "xa", "xb", beam=2)) == 5
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    finally:
        monkeypatch.undo()
        packed_kernel_works.cache_clear()
