"""The CUDA paths, on a CUDA GPU: training in fp32, bf16 and fp16 (with its gradient scaler), exact resume
with the GPU's random generator, the fused attention kernel, int8 refused, the library and the service.

Every test here is marked `cuda`: the README's test command (scripts/test.sh) deselects them, so CI,
which has no GPU, neither runs nor skips them; scripts/gpu-check.sh runs only them (`-m cuda`). Selected
where torch sees no CUDA GPU, each fails (tests/conftest.py: `pytest_runtest_setup`).

The thresholds of the comparisons between the CPU and the GPU are those the CPU's own reduced
precisions are held to (tests/test_int8.py, tests/test_inference_precision.py), not figures measured
on a GPU.
"""
from __future__ import annotations

import warnings

import pytest
import torch
from conftest import tiny_config

from interlingua.cli import main
from interlingua.config import parse_config
from interlingua.data.corpus import read_lines
from interlingua.data.prepare import prepare
from interlingua.errors import ConfigError
from interlingua.inference.api import load
from interlingua.model_files.checkpoint import Checkpoint
from interlingua.modules.transformer import _attention_weights, attention
from interlingua.training import trainer as trainer_mod
from interlingua.training.build import build_run
from interlingua.training.trainer import Trainer, train

pytestmark = pytest.mark.cuda

PRECISIONS = ("fp32", "bf16", "fp16")
DEVICE = "cuda"

# One line of --set-like sections per kind: the LSTM bridge model of tiny_config, and a shared pre-norm
# Transformer with the zero-shot recipes' dropouts and target-language embedding.
KINDS = {
    "lstm_bridge": {},
    "transformer": {
        "preprocess": {"joint_vocab": True},
        "model": {"shared": True, "tag_position": "decoder_start", "bridge": {"type": "none"},
                  "encoder": {"type": "transformer", "layers": 2, "heads": 4, "ff_dim": 128,
                              "attention_dropout": 0.2, "word_dropout": 0.1},
                  "decoder": {"type": "transformer", "layers": 1, "heads": 4, "ff_dim": 128, "tie_embeddings": True,
                              "language_embedding": "concat"}},
    },
}
RUN = {"directions": {"mode": "explicit", "pairs": [["en", "de"], ["de", "en"]], "languages": ["en", "de"]},
       "train": {"max_steps": 40, "valid_every": 20, "log_every": 10, "batch_size": 32, "lr": 0.003}}


def _cfg(corpus, work, kind: str, precision: str, **train):
    sections = KINDS[kind]
    cfg = tiny_config(corpus, work, directions=RUN["directions"], **{k: v for k, v in sections.items()})
    cfg["model"]["dropout"] = 0.2
    cfg["train"] = {**cfg["train"], **RUN["train"], "device": DEVICE, "precision": precision, **train}
    return parse_config(cfg)


def max_weight_difference(a, b) -> float:
    """The largest absolute difference between two checkpoints' weights (0.0: bit-identical)."""
    wa, wb = Checkpoint.read(a).weights, Checkpoint.read(b).weights
    assert wa.keys() == wb.keys()
    return max(float((wa[k].double() - wb[k].double()).abs().max()) if wa[k].numel() else 0.0 for k in wa)


@pytest.fixture(scope="module")
def prepared(multi30k_corpus, tmp_path_factory):
    """Each kind's prepared corpus, shared by its runs."""
    return {kind: prepare(_cfg(multi30k_corpus, tmp_path_factory.mktemp(kind), kind, "fp32")) for kind in KINDS}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_tiny_model_trains_on_cuda_in_each_precision(multi30k_corpus, prepared, tmp_path, kind, precision):
    run = build_run(_cfg(multi30k_corpus, tmp_path, kind, precision), data=prepared[kind])
    assert run.runtime.device.type == DEVICE and run.precision == precision
    assert all(p.device.type == DEVICE for p in run.network.parameters())
    assert (run.scaler is not None) == (precision == "fp16")  # a gradient scaler for fp16 only
    result = Trainer(run).train()
    assert result.steps == 40
    losses = [r["loss"] for r in run.metrics.records() if r.get("type") == "train"]
    assert len(losses) == 4 and all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0] - 0.5, losses  # it learns
    state = Checkpoint.read(tmp_path / "last.pt").training
    assert (DEVICE == "cuda") == ("cuda" in state.torch_rng)  # the GPU's generator is saved for exact resume
    if precision == "fp16":
        assert state.grad_scaler is not None and state.grad_scaler["scale"] > 0
    assert load(tmp_path / "best.pt", "cpu").translate(["A man is riding a bicycle."], "en", "de")[0] is not None


# fp16 (the gradient scaler's state too) for both kinds, and bf16; scripts/gpu-check.sh's training step
# resumes every kind in every precision at larger sizes
@pytest.mark.parametrize("kind, precision", [("lstm_bridge", "fp16"), ("transformer", "fp16"), ("transformer", "bf16")])
def test_ctrl_c_mid_step_on_cuda_resumes_as_an_uninterrupted_run(multi30k_corpus, prepared, tmp_path, monkeypatch,
                                                                   kind, precision):
    """Stopped inside step 27's passes (after its forward and backward drew from the GPU's generator),
    rolled back, saved and resumed: it ends where a run never stopped ends. Two uninterrupted runs are
    the yardstick: where they are bit-identical, so must the resumed one be; where the GPU's kernels are
    not deterministic (atomic additions), the resumed run may differ by no more than that noise, with
    a margin of 10x for the steps it compounds over."""
    data = prepared[kind]
    straight, twin, stopped = tmp_path / "straight", tmp_path / "twin", tmp_path / "stopped"
    for work in (straight, twin):
        train(_cfg(multi30k_corpus, work, kind, precision), data=data)
    original = trainer_mod.forward_backward
    calls = {"n": 0}

    def stop_in_step_27(run, micro):
        calls["n"] += 1
        sums = original(run, micro)
        if calls["n"] == 27:
            raise KeyboardInterrupt
        return sums

    monkeypatch.setattr(trainer_mod, "forward_backward", stop_in_step_27)
    with pytest.raises(KeyboardInterrupt, match="Ctrl-C at step 26: saved"):
        train(_cfg(multi30k_corpus, stopped, kind, precision), data=data)
    monkeypatch.setattr(trainer_mod, "forward_backward", original)
    assert Checkpoint.read(stopped / "last.pt").training.step == 26
    assert train(_cfg(multi30k_corpus, stopped, kind, precision), resume=True, data=data).steps == 40
    noise = max_weight_difference(straight / "last.pt", twin / "last.pt")
    resumed = max_weight_difference(straight / "last.pt", stopped / "last.pt")
    if noise == 0.0:
        assert resumed == 0.0, f"resumed run differs by {resumed:.3g} where two uninterrupted runs are identical"
    else:
        assert resumed <= 10 * noise, f"resumed run differs by {resumed:.3g}, two uninterrupted runs by {noise:.3g}"


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2), (torch.float16, 4e-3)])
def test_the_fused_attention_kernel_on_cuda_equals_the_spelled_out_softmax(dtype, tolerance):
    """Padded keys and causal self-attention (as the decoder calls it), against softmax(q k^T / sqrt(d)) v in fp32;
    in bf16 / fp16 a fused kernel (flash or memory-efficient, not the math fallback) must take the call."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    g = torch.Generator(device="cuda").manual_seed(0)
    b, h, n, d = 3, 4, 11, 32
    q, k, v = (torch.randn(b, h, n, d, device="cuda", generator=g).to(dtype) for _ in range(3))
    lengths = torch.tensor([11, 6, 1], device="cuda")
    keys = (torch.arange(n, device="cuda")[None, :] < lengths[:, None])[:, None, None, :]  # (b, 1, 1, n)
    fused = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION] if dtype != torch.float32 else \
        [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    for mask, causal in ((keys, False), (None, True)):
        expected = _attention_weights(q.float(), k.float(), mask, causal) @ v.float()
        with sdpa_kernel(fused):
            got = attention(q, k, v, mask, causal)
        assert got.dtype == dtype and got.device.type == "cuda"
        err = float((got.float() - expected).abs().max())
        assert err < tolerance, (mask is not None, causal, err)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_masked_attention_on_cuda_never_goes_to_cudnn(dtype):
    """cuDNN's attention builds a plan per new shape (about a second each on an H200): token batches and
    decoding bring new shapes every step, so a masked half-precision call must take flash or
    memory-efficient attention, and the process's own backend flags stay as they were."""
    from torch.profiler import ProfilerActivity, profile
    was = torch.backends.cuda.cudnn_sdp_enabled()
    ops: set[str] = set()
    for n in (7, 13, 21):
        q, k, v = (torch.randn(2, 4, n, 32, device="cuda", dtype=dtype) for _ in range(3))
        keys = (torch.arange(n, device="cuda")[None, :] < torch.tensor([n, n - 3], device="cuda")[:, None])
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            attention(q, k, v, keys[:, None, None, :])
        ops |= {event.key for event in prof.key_averages()}
    assert not any("cudnn_attention" in op for op in ops), sorted(ops)
    assert any("efficient_attention" in op or "flash_attention" in op for op in ops), sorted(ops)
    assert torch.backends.cuda.cudnn_sdp_enabled() == was


def test_attention_dropout_on_cuda_drops_in_the_fused_kernel_and_follows_the_seed():
    q, k, v = (torch.randn(2, 4, 9, 16, device="cuda") for _ in range(3))
    plain = attention(q, k, v)
    torch.manual_seed(3)
    first = attention(q, k, v, dropout=0.5)
    torch.manual_seed(3)
    again = attention(q, k, v, dropout=0.5)
    assert torch.equal(first, again)  # the GPU's generator decides the mask
    assert not torch.allclose(first, plain)
    assert torch.isfinite(first).all()


def test_int8_is_refused_on_cuda(trained_model, capsys):
    with pytest.raises(ConfigError, match="int8 runs on the CPU only"):
        load(trained_model, "cuda", precision="int8")
    code = main(["translate", "--model", str(trained_model), "--src", "en", "--tgt", "de", "--device", "cuda",
                 "--precision", "int8", "-i", "/dev/null"])
    assert code != 0
    assert "int8 runs on the CPU only" in capsys.readouterr().err


EN = ["A man is riding a bicycle down the street.", "Two dogs are playing in the snow.", "A woman sings on a stage.",
      "A little girl climbs into a wooden playhouse.", "Two men are standing in front of a building."]


@pytest.fixture(scope="module")
def on_cpu(trained_model):
    return load(trained_model, "cpu")


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_model_on_cuda_translates_and_embeds_as_on_the_cpu(trained_model, on_cpu, multi30k_corpus, precision):
    """The session's tiny trained model (tests/conftest.py) on its own training lines: fp32 on the GPU
    gives the CPU's translations and vectors; bf16 and fp16 differ in places at most."""
    lines = read_lines(multi30k_corpus.parent / "train.en.gz")[:100]
    gpu = load(trained_model, "cuda", precision=precision)
    assert gpu.device.type == "cuda"
    for beam in (1, 4):
        ours, theirs = gpu.translate(lines, "en", "de", beam=beam), on_cpu.translate(lines, "en", "de", beam=beam)
        same = sum(a == b for a, b in zip(ours, theirs)) / len(lines)
        assert same >= (0.95 if precision == "fp32" else 0.9), (beam, same)
    a, b = gpu.encode(lines, "en"), on_cpu.encode(lines, "en")
    cosine = (a * b).sum(1) / (((a * a).sum(1) * (b * b).sum(1)) ** 0.5)
    assert cosine.min() > (0.9999 if precision == "fp32" else 0.99), cosine.min()


def test_the_service_on_cuda_answers_what_the_library_does(trained_model):
    import numpy as np
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
        from fastapi.testclient import TestClient

    from interlingua.serving.app import build_app
    model = load(trained_model, "cuda", precision="bf16")
    with TestClient(build_app(model)) as client:
        response = client.post("/translate", json={"texts": EN, "src": "en", "tgt": "de", "beam": 3})
        assert response.status_code == 200, response.text
        assert response.json()["translations"] == model.translate(EN, "en", "de", beam=3)
        response = client.post("/embed", json={"texts": EN, "lang": "en"})
        assert response.status_code == 200, response.text
        np.testing.assert_allclose(np.asarray(response.json()["vectors"], dtype=np.float32), model.encode(EN, "en"),
                                   atol=1e-5)
        health = client.get("/health")
        assert health.status_code == 200, health.text
