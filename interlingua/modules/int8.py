"""int8 inference on the CPU (`precision: int8`): linear layers with int8 weights and int8 activations.

`Int8Linear` stands in for an `nn.Linear` of a trained model:

- its weights are int8, symmetric (zero point 0, range -127..127), one scale per output channel,
  computed once by torchao's quantization primitives (`choose_qparams_affine` with
  `MappingType.SYMMETRIC` over blocks of one output row, then `quantize_affine`);
- its input is quantized at every call, symmetric, **one scale per row** (per token / per sentence
  state): a row's int8 values and scale depend on that row alone, the int32 sums of the product
  are exact, so a sentence's output never depends on what it is batched with;
- the product runs in one of three kernels computing exact int32 sums: oneDNN's int8 linear
  (`torch.ops.onednn.qlinear_pointwise`, AMX / VNNI kernels: input scale 1, fp32 output already
  multiplied by the weight scales), `torch._int_mm`, or fbgemm's (`torch.ops.quantized.linear_dynamic`,
  the one CPUs without VNNI run fast: AVX2's `vpmaddubsw`); then the row scales and the bias are applied
  in one `addcmul`. fbgemm's kernel quantizes a call's whole input with one scale and zero point, and its
  AVX2 products saturate beyond 7-bit inputs, so it is given rows already quantized to integers in
  -63..63 (`LEVELS`) and one more row holding -64 and 63, which pins its scale to 1 and its zero point to
  64: the integers pass through unchanged, the sums are exact, and a row's output is again its own. It
  is chosen only for a model where no 8-bit kernel pays at any layer shape (`Int8Plan.from_times`), so
  that its coarser inputs never replace an 8-bit kernel that works.

Which kernel, if any, a layer uses is measured on the machine, never assumed (`int8_plan`): their
speeds differ by hundreds of times from one CPU to another (on an Intel Xeon with AMX oneDNN's was
the faster; on an AMD EPYC with AVX512-VNNI it took 200-800x fp32's time while torch._int_mm ran
1.1-2.4x faster than fp32 for layers of 128k weights and more). Each of the model's layer shapes is
timed once in fp32 and with every kernel that works here, at the rows of a decoding step
(`MEASURE_ROWS`), and the answer is cached in precision.json beside bf16's (per CPU model, int8
flags, torch version and thread count; one taken while other processes kept the CPUs busy is used,
and taken again once the machine is quieter). A layer gets the fastest kernel where it is at least
`MIN_KERNEL_SPEEDUP` times as fast as fp32 and stays fp32 otherwise; where no layer gets one,
`precision: int8` is refused with one line naming what was measured, so int8 is never slower than
fp32. An output layer that fp32 decoding runs as oneDNN's packed product (`packed_linear`) has to beat that
product, not nn.Linear: where int8 is not `MIN_KERNEL_SPEEDUP` times its speed, the layer stays fp32 and is
packed as in fp32. Only layers that are big enough are considered at all (`MIN_INT8_WEIGHTS`): below that size
the per-call cost of quantizing the input and calling the kernel is more than fp32's whole product
(`bench/int8_linear.py`; measured numbers in docs/results/speed.md). The decoders' output layers
(`generator`) are quantized like any other layer; where a Transformer decoder ties its output
layer to the target embeddings, the embedding keeps its fp32 table (the int8 copy is the output
layer's own).

LSTMs are stepped through linear layers where that lets int8 pay (`LinearLSTM`): the LSTM
decoder's recurrence (one token at a time in search) computes each layer's four gates with one
linear layer over [x, h] (weights cat(W_ih, W_hh), bias b_ih + b_hh) and then the usual
sigmoid / tanh cell update; in fp32 it equals `nn.LSTM` (to ~1e-6). One step of batch 64 (256 / 256,
2 threads) takes 0.30 ms with int8 gates against nn.LSTM's 0.51 ms, 0.95 against 2.9 ms at 512 / 512
with 2 layers (batch 320: 1.9x and 3.7x); two products (input and recurrent apart) were slower than
one at every size. The BiLSTM encoder keeps `nn.LSTM`'s fused fp32 kernel, which the int8 form
(input projections of all time steps in one int8 product, then a recurrent loop) beat only at the
papers' sizes in large batches (`ENCODER_LSTM_INT8`).

torchao's own int8 path (`Int8DynamicActivationInt8WeightConfig`) was slower than fp32 on the CPU
in eager mode (tensor-subclass dispatch) and needs seconds of `torch.compile` per shape, so only its
quantization primitives are used. torchao is imported only here and only when a model is quantized
(`_torchao_primitives`), with the messages it prints at import on CPU-only machines (its CUDA
extensions failing to load, a torch deprecation warning) silenced for that import alone.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn

from interlingua.errors import ConfigError
from interlingua.modules import kernel_timing
from interlingua.modules.activations import tanh_by_sigmoid
from interlingua.modules.kernel_timing import (
    KernelTimes,
    cached_times,
    fastest_calls,
    first_calls,
    ms_text,
    random_linear,
    shape_label,
)
from interlingua.modules.packed_linear import fp32_output_gain, restricted_output_layers
from interlingua.precision import cpu_model, int8_features, machine_key

log = logging.getLogger(__name__)

KERNELS = ("onednn", "int_mm", "fbgemm")
"""The int8 matrix products: oneDNN's qlinear (prepacked weights), torch._int_mm, fbgemm's (prepacked weights,
7-bit inputs). Which one a layer uses is measured here (`int8_plan`)."""

KERNEL_NAMES = {"onednn": "oneDNN qlinear", "int_mm": "torch._int_mm", "fbgemm": "fbgemm (7-bit inputs)"}

LEVELS = {"onednn": 127, "int_mm": 127, "fbgemm": 63}
"""The largest integer an input row is quantized to (round(x * levels / max|x|)) for each kernel: 8-bit inputs,
except fbgemm's 7-bit ones, whose AVX2 products (pairs of u8 x s8 summed in 16 bits) would saturate beyond
them. On an AMD EPYC with AVX2 only (no VNNI; 2026-12-02, 2 threads), where torch._int_mm took 14-35x fp32's
time, fbgemm's product so fed ran 2.0-2.7x as fast as fp32 at 512x8000 and 1024x2048 (64 and 320 rows), with a
relative error of 1.2% against fp32's product (8-bit inputs: about half that)."""

EIGHT_BIT = tuple(k for k in KERNELS if LEVELS[k] == 127)
"""The kernels with 8-bit inputs, preferred wherever one of them pays (`Int8Plan.from_times`)."""

MEASURE_ROWS = (64, 320)
"""Rows at which each layer shape is timed (the times added up): one decoding step of a batch of 64, greedy
and beam 5, the defaults of `translate`, where translation spends its time."""

MIN_KERNEL_SPEEDUP = 1.1
"""A layer runs in int8 only where its fastest kernel is at least this much faster than fp32 at its shape: the
margin bf16 needs too (`MIN_BF16_SPEEDUP`), so that timing noise never picks a kernel that does not pay."""

GIVE_UP_FACTOR = 10.0
"""A kernel whose first calls take more than this many times fp32's at one of the model's shapes is timed no
further in that measurement: where it is slow it takes hundreds of milliseconds to seconds a call, and timing it
at every shape would take minutes for an answer the first shape gave."""

PROBE_GIVE_UP_FACTOR = 50.0
"""The same at the small probe shape (`_PROBE`), where a kernel's fixed cost per call weighs most. oneDNN's
qlinear on an AMD EPYC took 480-2,200x fp32's time there, a kernel to drop at once. On an Intel Xeon with AMX
(2026-11-29, 2 threads) it took 3-12x fp32's time at the probe shape (0.08-0.37 ms against 0.02-0.03 ms),
yet at the models' output layers it was the fastest of all: 512x8000 at 320 rows 1.86 ms against
torch._int_mm's 3.4-4.8 ms and fp32's 10.3 ms. Given up at 10x there, it was never timed at those shapes, and
beam search ran torch._int_mm."""

_PROBE = (64, 128, 128)
"""rows x in x out where each kernel is first tried: a call of ~0.05 ms in fp32 here, ~60 ms where a kernel
is 1,000x slower (oneDNN's on an AMD EPYC), where the same kernel took 2-12 s a call at 512x8000."""
MIN_INT8_WEIGHTS = 100_000
"""A linear layer is quantized only when it has at least this many weights (in x out). Measured on an
Intel Xeon with AMX-INT8 (`bench/int8_linear.py`, 2 threads, quiet machine, oneDNN kernel, int8 time
against fp32's): layers of 16k-65k weights ran at 0.3-0.6x fp32's speed for 64 rows (a decoding step
of batch 64) and ~1x for 320 rows (beam 5); 131k-weight ones (256x512, 512x256) at 0.8x for 64 rows,
1.4-1.5x for 320 and 2.2x for 1,280; from 262k weights up 1.2-4.4x at every row count. Whole models
(500 sentences, 2 threads): the demo LSTM model with thresholds 60k / 100k / 300k decoded greedy at
1.21 / 1.19 / 1.21x, beam 5 at 1.32 / 1.33 / 1.27x; the zero-shot Transformer (d_model 128) with 30k /
60k / 100k greedy at 0.86 / 0.92 / 1.04x, beam 5 at 1.01 / 1.02 / 1.05x."""

ENCODER_LSTM_INT8 = False
"""Whether the BiLSTM encoders are also run as `LinearLSTM`s with int8 products (all time steps' input
projections in one product, then the recurrent loop). Measured against nn.LSTM's fused fp32 kernel, one
direction (`bench/int8_linear.py` lstm_encoder, 2 threads): batch 64 x 20 steps, 256 -> 128 (the demo's
size) 3.2 ms against 2.35 ms; 512 -> 256 (the papers') 5.8 against 7.5 ms (1.3x); one sentence of 12
tokens (the service) 0.44 against 0.20 ms. Slower at the sizes of the models here and for single
sentences, so the encoders keep nn.LSTM."""

_ONEDNN_MIN_ROWS = 4
"""oneDNN's int8 linear takes a slow path for 1 row (and for 2 rows of some shapes): 0.5-14 ms instead of
~0.06 ms per call here (torch 2.13); fewer rows are padded with zero rows to this many."""

_EPS = 1e-12
"""Smallest row maximum: an all-zero row (padding) quantizes to zeros instead of dividing by 0."""


@contextlib.contextmanager
def _quiet(*loggers: str) -> Iterator[None]:
    """Silence `loggers` (and the loggers below them) and every Python warning for the duration (an
    import's noise); their levels are restored afterwards."""
    targets = [logging.getLogger(name) for name in loggers]
    levels = [logger.level for logger in targets]
    for logger in targets:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(targets, levels):
            logger.setLevel(level)


@functools.lru_cache(maxsize=1)
def _torchao_primitives() -> Any:
    """torchao's quant_primitives module, imported once, quietly (on a CPU-only machine torchao logs a
    failure to load each of its CUDA extensions, and torch warns about one of its Enum registrations)."""
    try:
        with _quiet("torchao", "torch.utils._pytree"):
            from torchao.quantization import quant_primitives  # type: ignore[import-untyped]
    except ImportError as err:
        raise ConfigError(f"precision int8 needs torchao (pip install torchao==0.18.0): {err}") from None
    return quant_primitives


def quantize_weight(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, in) float weights -> int8 weights (out, in) and one fp32 scale per output row (out,):
    symmetric, range -127..127, by torchao's `choose_qparams_affine` and `quantize_affine`."""
    qp = _torchao_primitives()
    w = weight.detach().float()
    block = (1, w.size(1))
    scale, zero_point = qp.choose_qparams_affine(w, qp.MappingType.SYMMETRIC, block, torch.int8, -127, 127,
                                                 eps=torch.finfo(torch.float32).eps, scale_dtype=torch.float32)
    q = qp.quantize_affine(w, block, scale, zero_point, torch.int8, -127, 127)
    return q, scale.reshape(-1).float()


def _reference_product(q: torch.Tensor, qweight: torch.Tensor) -> torch.Tensor:
    return q.double() @ qweight.double().t()


@functools.cache
def kernel_works(kernel: str) -> bool:
    """Whether `kernel` exists in this torch build and gives the exact int8 products here (of inputs in its range,
    `LEVELS`)."""
    gen = torch.Generator().manual_seed(0)
    levels = LEVELS[kernel]
    qweight = torch.randint(-127, 128, (24, 40), generator=gen, dtype=torch.int8)
    q = torch.randint(-levels, levels + 1, (5, 40), generator=gen, dtype=torch.int8)
    try:
        layer = Int8Linear(qweight, torch.ones(24) * levels, None, kernel)
        got, one = layer._products(q).double(), layer._products(q[:1]).double()
    except Exception as err:  # noqa: BLE001 - a missing op or an unsupported CPU: use the next kernel
        log.debug("int8 kernel %s unavailable: %s", kernel, err)
        return False
    want = _reference_product(q, qweight)
    return bool(torch.equal(got, want) and torch.equal(one, want[:1]))


def check_kernel(kernel: str) -> str:
    """`kernel`, checked: one of `KERNELS` that works in this torch build on this CPU."""
    if kernel not in KERNELS:
        raise ConfigError(f"unknown int8 kernel '{kernel}': use one of {', '.join(KERNELS)}")
    if not kernel_works(kernel):
        raise ConfigError(f"the int8 kernel '{kernel}' does not work in this torch build on this CPU")
    return kernel


def working_kernels() -> list[str]:
    """The `KERNELS` that work here; `ConfigError` where none does."""
    found = [k for k in KERNELS if kernel_works(k)]
    if not found:
        raise ConfigError("precision int8: none of oneDNN's int8 linear, torch._int_mm and fbgemm's works in this "
                          f"torch build (torch {torch.__version__}); use fp32")
    return found


@torch.inference_mode()
def time_kernels(shapes: Iterable[tuple[int, int]], kernels: Sequence[str]) -> KernelTimes:
    """Time `nn.Linear` (fp32) and `Int8Linear` with each of `kernels` at every (in, out) of `shapes`, for
    `MEASURE_ROWS` rows of random inputs: a warm-up call each, then interleaved rounds (`kernel_timing`), the
    fastest call kept. A kernel over `PROBE_GIVE_UP_FACTOR` times fp32's time at the small `_PROBE` shape (every
    call of up to three) or over `GIVE_UP_FACTOR` times at a shape is timed no further (`KernelTimes.given_up` says
    where and how slow): first at the probe, so that a kernel that slow never runs at a model's big layers (a call of
    seconds), then at each shape, smallest first (its first two calls)."""
    gen = torch.Generator().manual_seed(0)
    times = KernelTimes({})
    rows, n_in, n_out = _PROBE
    probe, x = random_linear(n_in, n_out, gen), torch.randn(rows, n_in, generator=gen)
    fp32 = min(kernel_timing.time_block(probe, x, 1) for _ in range(3))
    for k in kernels:
        q, tries = Int8Linear.from_linear(probe, k), list[float]()
        while len(tries) < 3 and min(tries, default=float("inf")) > PROBE_GIVE_UP_FACTOR * fp32:
            tries.append(kernel_timing.time_block(q, x, 1))
        if min(tries) > PROBE_GIVE_UP_FACTOR * fp32:
            times.given_up[k] = (f"{min(tries) / fp32:,.0f}x fp32's time at {rows}x{n_in}x{n_out}, the probe shape, "
                                 f"{ms_text(min(tries))} against {ms_text(fp32)}")
    for n_in, n_out in sorted(set(shapes), key=lambda s: (s[0] * s[1], s)):
        linear = random_linear(n_in, n_out, gen)
        variants: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"fp32": linear}
        for k in kernels:
            if k not in times.given_up:
                variants[k] = Int8Linear.from_linear(linear, k)
        label = shape_label(n_in, n_out)
        totals = {name: 0.0 for name in variants}
        for rows in MEASURE_ROWS:
            x = torch.randn(rows, n_in, generator=gen)
            estimate = first_calls(variants, x)
            for name in list(variants):
                if name != "fp32" and estimate[name] > GIVE_UP_FACTOR * estimate["fp32"]:
                    times.given_up[name] = (f"{estimate[name] / estimate['fp32']:,.0f}x fp32's time at {rows}x{label}, "
                                            f"{ms_text(estimate[name])} against {ms_text(estimate['fp32'])}")
                    del variants[name], totals[name]
            best = fastest_calls(variants, x, estimate)
            for name in variants:
                totals[name] += best[name]
        times.seconds[label] = {name: float(f"{totals[name]:.4g}") if name in totals else None
                                for name in ("fp32", *kernels)}
    return times


@dataclass(frozen=True)
class Int8Plan:
    """Which int8 kernel each measured layer shape runs (None: fp32, no kernel pays there), from `times`."""

    times: KernelTimes
    kernels: dict[str, str | None]
    cached: bool = False

    @classmethod
    def from_times(cls, times: KernelTimes, cached: bool = False) -> Int8Plan:
        """Each shape's fastest kernel where it is at least `MIN_KERNEL_SPEEDUP` times as fast as fp32: among the
        8-bit kernels (`EIGHT_BIT`) where one of them pays at some shape, else among the others (fbgemm's 7-bit
        inputs, for CPUs where no 8-bit kernel pays)."""
        eight_bit = cls._fastest(times, EIGHT_BIT)
        others = tuple(k for k in KERNELS if k not in EIGHT_BIT)
        kernels = eight_bit if any(eight_bit.values()) else cls._fastest(times, others)
        return cls(times, kernels, cached)

    @staticmethod
    def _fastest(times: KernelTimes, among: Sequence[str]) -> dict[str, str | None]:
        kernels: dict[str, str | None] = {}
        for label, row in times.seconds.items():
            timed = {k: v for k, v in row.items() if k in among and v is not None and v > 0}
            best = min(timed, key=lambda k: timed[k]) if timed else None
            fp32 = row["fp32"] or 0.0
            kernels[label] = best if best is not None and fp32 / timed[best] >= MIN_KERNEL_SPEEDUP else None
        return kernels

    def kernel_for(self, n_in: int, n_out: int) -> str | None:
        return self.kernels.get(shape_label(n_in, n_out))

    def describe(self) -> str:
        """Each shape and what it runs ("512x8000=onednn 512x512=fp32"): what a measurement of the quantized
        model depends on, so a cached one is taken again when the plan changes."""
        return " ".join(f"{label}={kernel or 'fp32'}" for label, kernel in sorted(self.kernels.items()))

    def refusal(self) -> str | None:
        """None where some layer shape gets a kernel; else one line saying what was measured, closest shape first."""
        if any(self.kernels.values()) or not self.kernels:
            return None

        def ratio(label: str) -> float:
            row = self.times.seconds[label]
            timed = [v for k, v in row.items() if k != "fp32" and v is not None]
            return min(timed) / (row["fp32"] or 1e-12) if timed else float("inf")

        def closest(label: str) -> tuple[float, int, str]:  # ties: the biggest shape
            n_in, n_out = _parse_label(label)
            return ratio(label), -n_in * n_out, label

        label = min(self.kernels, key=closest)
        row = self.times.seconds[label]
        parts = []
        for k, v in sorted(((k, v) for k, v in row.items() if k != "fp32"),
                           key=lambda kv: (float("inf") if kv[1] is None else kv[1], kv[0])):
            name = KERNEL_NAMES.get(k, k)
            parts.append(f"{name} {ms_text(v)} ({v / (row['fp32'] or 1e-12):.2f}x fp32's time)" if v is not None
                         else f"{name} not timed there ({self.times.given_up.get(k, 'not measured')})")
        threads = torch.get_num_threads()
        return (f"int8 refused on this CPU ({cpu_model()}, torch {torch.__version__}, {threads} "
                f"thread{'s' if threads != 1 else ''}): no int8 kernel is {MIN_KERNEL_SPEEDUP}x as fast as fp32 at "
                f"this model's layer shapes ({len(self.kernels)} measured); the closest, {label} weights at "
                f"{' + '.join(str(r) for r in MEASURE_ROWS)} rows: {', '.join(parts)}, "
                f"fp32 {ms_text(row['fp32'] or 0.0)}; use fp32")


def _parse_label(label: str) -> tuple[int, int]:
    n_in, _, n_out = label.partition("x")
    return int(n_in), int(n_out)


def int8_plan(shapes: Iterable[tuple[int, int]]) -> Int8Plan:
    """The measured kernel of each (in, out) layer shape: from precision.json where this CPU model, its int8
    flags, torch version and thread count have timed these shapes and kernels before, else timed now
    (`time_kernels`, a fraction of a second to a few seconds) and cached."""
    kernels = working_kernels()
    labels = sorted({shape_label(*s) for s in shapes}, key=_parse_label)
    rows = ",".join(str(r) for r in MEASURE_ROWS)
    # the probe's factor in the key: a plan measured under another give-up rule is measured again
    key = machine_key(int8_features(), f"int8 kernels {'+'.join(kernels)} at rows {rows}, probe "
                                       f"{PROBE_GIVE_UP_FACTOR:g}x: {' '.join(labels)}")

    def measure() -> KernelTimes:
        log.info("timing the int8 kernels (%s) against fp32 at %d layer shape(s) (once per machine)",
                 ", ".join(KERNEL_NAMES[k] for k in kernels), len(labels))
        return time_kernels([_parse_label(x) for x in labels], kernels)

    times, cached = cached_times(key, labels, measure, "the int8 kernels",
                                 lambda t: {"kernels": Int8Plan.from_times(t).kernels})
    return Int8Plan.from_times(times, cached=cached)


class Int8Linear(nn.Module):
    """y = x W^T + b with W int8 per output channel and x quantized to int8 per row at each call (see
    the module's docstring). Inference only: it holds no parameters, nothing to train."""

    scale: torch.Tensor
    bias: torch.Tensor | None

    def __init__(self, qweight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None, kernel: str):
        """`qweight` (out, in) int8, `scale` (out,) its scales, `bias` (out,) or None, `kernel` one of `KERNELS`."""
        super().__init__()
        if kernel not in KERNELS:
            raise ValueError(f"unknown int8 kernel '{kernel}'")
        self.out_features, self.in_features = qweight.shape
        self.kernel, self.levels = kernel, LEVELS[kernel]
        # an input row is quantized as round(x * levels / max|x|): the 1/levels joins the weight scales once
        self.register_buffer("scale", scale.detach().float().reshape(-1) / self.levels)
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone())
        self._packed: torch.Tensor | None = None
        self._fbgemm: Any = None
        self._qweight_t: torch.Tensor | None = None
        self._unpacked: torch.Tensor | None = None  # the int8 weights as (out, in), kept for `rows` (a shortlist)
        if kernel == "onednn":  # prepacked for the CPU's int8 instructions (the only copy kept)
            self._packed = torch.ops.onednn.qlinear_prepack(qweight.contiguous(), None)
            self._zero_points = torch.zeros(self.out_features, dtype=torch.long)
        elif kernel == "fbgemm":  # prepacked, with the scales: its products come out scaled
            if self.in_features < 2:
                raise ValueError("the fbgemm int8 kernel needs at least 2 inputs (its pinning row holds two values)")
            with _quiet():  # torch 2.13 warns that its quantized tensors are deprecated: `kernel_works` checks it works
                weight = torch._make_per_channel_quantized_tensor(
                    qweight.contiguous(), self.scale.double(), torch.zeros(self.out_features, dtype=torch.long), 0)
                self._fbgemm = torch.ops.quantized.linear_prepack(weight, None)
            self._pin = torch.zeros(1, self.in_features)
            self._pin[0, :2] = torch.tensor([-self.levels - 1.0, float(self.levels)])
        else:
            self._qweight_t = qweight.t()

    @classmethod
    def from_linear(cls, linear: nn.Linear, kernel: str) -> Int8Linear:
        """An int8 copy of `linear` (whose fp32 weight the caller can then drop)."""
        qweight, scale = quantize_weight(linear.weight)
        return cls(qweight, scale, linear.bias, kernel)

    def int8_weight(self) -> torch.Tensor:
        """The int8 weights (out, in)."""
        if self._packed is not None:
            return self._packed.to_dense().t()  # oneDNN's packed layout unpacks to (in, out)
        if self._fbgemm is not None:
            return torch.ops.quantized.linear_unpack(self._fbgemm)[0].int_repr()
        assert self._qweight_t is not None
        return self._qweight_t.t()

    def rows(self, ids: torch.Tensor) -> Int8Linear:
        """The layer of the output rows `ids` alone (a lexical shortlist's candidates, made for every batch):
        the same int8 weights and scales, so the same products. It runs torch._int_mm where that works, as it
        needs no packing: for 2,500 x 512 candidate rows oneDNN's prepack took 9.5 ms, about 13 of its products
        at 64 rows, and its first product at the new shape 1.5-2.3 ms more, where torch._int_mm's products took
        as long as oneDNN's (Intel Xeon with AMX, 2 threads, 2026-11-29). oneDNN's packed weights are unpacked
        once and kept (2.5-3.5 ms a batch for a 512 x 8,000 layer otherwise)."""
        if self._unpacked is None:  # torch._int_mm's layer: a view of its weights; oneDNN's and fbgemm's: unpacked once
            self._unpacked = self.int8_weight()
        bias = None if self.bias is None else self.bias.index_select(0, ids)
        kernel = "int_mm" if self.kernel == "onednn" and kernel_works("int_mm") else self.kernel
        return Int8Linear(self._unpacked.index_select(0, ids), self.scale.index_select(0, ids) * self.levels, bias,
                          kernel)

    def dequantized_weight(self) -> torch.Tensor:
        """The weights the int8 ones stand for, fp32 (out, in) (for code that reads rows of an output layer)."""
        return self.int8_weight().float() * (self.scale * self.levels).unsqueeze(1)

    def _products(self, q: torch.Tensor) -> torch.Tensor:
        """Integer rows (n, in) in -levels..levels (int8, or float holding integers) -> (n, out) fp32: their exact
        int32 products with W, times the weight scales."""
        if self._fbgemm is not None:  # the pinning row fixes the input's scale at 1 and its zero point at levels + 1
            y = torch.ops.quantized.linear_dynamic(torch.cat([q.float(), self._pin]), self._fbgemm, True)
            return y[:-1]
        q = q.to(torch.int8)
        if self._packed is not None:
            n = q.size(0)
            if n < _ONEDNN_MIN_ROWS:  # padded with zero rows: the real rows' sums are the same
                q = torch.nn.functional.pad(q, (0, 0, 0, _ONEDNN_MIN_ROWS - n))
            y = torch.ops.onednn.qlinear_pointwise(q, 1.0, 0, self._packed, self.scale, self._zero_points, None,
                                                   1.0, 0, torch.float32, "none", [], "")
            return y[:n] if n < _ONEDNN_MIN_ROWS else y
        assert self._qweight_t is not None
        return torch._int_mm(q, self._qweight_t).float().mul_(self.scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        rows = x.reshape(-1, self.in_features).float()
        amax = rows.abs().amax(1, keepdim=True).clamp_min_(_EPS)
        y = self._products((rows * (self.levels / amax)).round_())
        y = y.mul_(amax) if self.bias is None else torch.addcmul(self.bias, y, amax)
        return y.view(*lead, self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"kernel={self.kernel}")


def _lstm_cell(gates: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """nn.LSTM's cell update from its four gates (batch, 4H), in its order i, f, g, o (inference only: its tanh is
    `tanh_by_sigmoid`)."""
    h = c.size(-1)
    s = torch.sigmoid(gates)
    c = torch.addcmul(s[:, h:2 * h] * c, s[:, :h], tanh_by_sigmoid(gates[:, 2 * h:3 * h]))
    return s[:, 3 * h:] * tanh_by_sigmoid(c), c


class LinearLSTM(nn.Module):
    """A unidirectional, batch-first `nn.LSTM` at inference, written as linear layers and the cell update,
    so that its products can be int8 (`Int8Linear`): called as that LSTM is, (input (batch, T, in),
    (h0, c0) (layers, batch, H) or None) -> (output (batch, T, H), (h_n, c_n)).

    `fused`: each layer's gates are one linear layer over [x_t, h] (weights cat(W_ih, W_hh), bias
    b_ih + b_hh): one product per step, for a decoder stepped one token at a time. Otherwise each layer
    has an input projection (bias b_ih + b_hh), applied to every time step at once, and a recurrent
    one (no bias) applied step by step: for a whole sequence (an encoder)."""

    def __init__(self, input_size: int, hidden: int, layers: int, fused: bool):
        super().__init__()
        self.input_size, self.hidden_size, self.num_layers, self.fused = input_size, hidden, layers, fused
        sizes = [input_size] + [hidden] * (layers - 1)
        self.gates = nn.ModuleList(nn.Linear(n + hidden, 4 * hidden) for n in sizes) if fused else None
        self.ih = None if fused else nn.ModuleList(nn.Linear(n, 4 * hidden) for n in sizes)
        self.hh = None if fused else nn.ModuleList(nn.Linear(hidden, 4 * hidden, bias=False) for _ in sizes)

    @classmethod
    def from_lstm(cls, lstm: nn.LSTM, fused: bool) -> LinearLSTM:
        """The same function as `lstm` (unidirectional, batch_first, no projection), its weights copied."""
        if lstm.bidirectional or lstm.proj_size or not lstm.batch_first:
            raise ValueError("LinearLSTM stands for unidirectional batch-first LSTMs without projections")
        out = cls(lstm.input_size, lstm.hidden_size, lstm.num_layers, fused)
        with torch.no_grad():
            for i in range(lstm.num_layers):
                w_ih, w_hh = getattr(lstm, f"weight_ih_l{i}"), getattr(lstm, f"weight_hh_l{i}")
                if lstm.bias:
                    bias = getattr(lstm, f"bias_ih_l{i}") + getattr(lstm, f"bias_hh_l{i}")
                else:
                    bias = w_ih.new_zeros(w_ih.size(0))
                if out.gates is not None:
                    gates = cast(nn.Linear, out.gates[i])
                    gates.weight.copy_(torch.cat([w_ih, w_hh], dim=1))
                    gates.bias.copy_(bias)
                else:
                    assert out.ih is not None and out.hh is not None
                    ih, hh = cast(nn.Linear, out.ih[i]), cast(nn.Linear, out.hh[i])
                    ih.weight.copy_(w_ih)
                    ih.bias.copy_(bias)
                    hh.weight.copy_(w_hh)
        return out.to(next(lstm.parameters()).device).eval()

    def forward(self, x: torch.Tensor, hx: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        batch, steps = x.size(0), x.size(1)
        if hx is None:
            zeros = x.new_zeros(self.num_layers, batch, self.hidden_size)
            hx = (zeros, zeros)
        hs, cs = [], []
        for layer in range(self.num_layers):
            h, c = hx[0][layer], hx[1][layer]
            outs = []
            if self.gates is not None:
                gates = self.gates[layer]
                for t in range(steps):
                    h, c = _lstm_cell(gates(torch.cat([x[:, t], h], dim=1)), c)
                    outs.append(h)
            else:
                assert self.ih is not None and self.hh is not None
                projected, recurrent = self.ih[layer](x), self.hh[layer]
                for t in range(steps):
                    h, c = _lstm_cell(projected[:, t] + recurrent(h), c)
                    outs.append(h)
            x = outs[0].unsqueeze(1) if steps == 1 else torch.stack(outs, dim=1)
            hs.append(h)
            cs.append(c)
        return x, (torch.stack(hs), torch.stack(cs))


def _gate_weights(lstm: nn.LSTM) -> int:
    """Weights of the largest layer `LinearLSTM` makes of `lstm` (fused: the first layer's gates over [x, h])."""
    return 4 * lstm.hidden_size * (max(lstm.input_size, lstm.hidden_size) + lstm.hidden_size)


def _lstms_to_rewrite(network: nn.Module, encoder: bool, min_weights: int) -> list[tuple[nn.Module, str, bool]]:
    """(parent, attribute, fused) of every LSTM that `linear_lstms` rewrites: the LSTM decoders' (fused)
    and, with `encoder`, the BiLSTM encoders' (split), where the gates reach `min_weights`."""
    from interlingua.modules.decoders import LSTMDecoder
    from interlingua.modules.encoders import BiLSTMEncoder
    found: list[tuple[nn.Module, str, bool]] = []
    for module in network.modules():
        if isinstance(module, LSTMDecoder) and isinstance(module.lstm, nn.LSTM):
            if _gate_weights(module.lstm) >= min_weights:
                found.append((module, "lstm", True))
        elif encoder and isinstance(module, BiLSTMEncoder):
            for stack in (module.forward_layers, module.backward_layers):
                for i, lstm in enumerate(stack):
                    if isinstance(lstm, nn.LSTM) and 4 * lstm.hidden_size * lstm.input_size >= min_weights:
                        found.append((stack, str(i), False))
    return found


def linear_lstms(network: nn.Module, encoder: bool | None = None, min_weights: int = 0) -> int:
    """Replace, in place, the `nn.LSTM` of every LSTM decoder by its fused `LinearLSTM` (and, with
    `encoder`, default `ENCODER_LSTM_INT8`, the BiLSTM encoders' LSTMs by split ones), where its gates
    have at least `min_weights` weights; returns how many were replaced. The function is the same (in
    fp32 to rounding); training keeps `nn.LSTM` (this is for inference)."""
    found = _lstms_to_rewrite(network, ENCODER_LSTM_INT8 if encoder is None else encoder, min_weights)
    for parent, name, fused in found:
        setattr(parent, name, LinearLSTM.from_lstm(getattr(parent, name), fused=fused))
    return len(found)


def is_quantized(network: nn.Module) -> bool:
    """Whether `network` holds int8 layers (from `quantize_network`)."""
    return any(isinstance(m, Int8Linear) for m in network.modules())


def check_quantizable(network: nn.Module, *, min_weights: int | None = None, encoder_lstm: bool | None = None
                      ) -> None:
    """Raise `ConfigError` naming why `quantize_network` (same arguments) would quantize nothing: weights on
    another device than the CPU, no linear layer at all, none big enough for int8 to pay."""
    devices = {t.device.type for t in [*network.parameters(), *network.buffers()]} - {"cpu"}
    if devices:
        raise ConfigError(f"precision int8 runs on the CPU only; this model is on {', '.join(sorted(devices))}")
    if is_quantized(network):
        raise ValueError("this network is quantized already")
    threshold = MIN_INT8_WEIGHTS if min_weights is None else min_weights
    keep = restricted_output_layers(network)
    lstms = [m for m in network.modules() if isinstance(m, nn.LSTM)]
    linears = [m for m in network.modules() if isinstance(m, nn.Linear) and id(m) not in keep]
    if not linears and not lstms:
        raise ConfigError(f"precision int8: this model ({type(network).__name__}) has no linear layer (nn.Linear) "
                          "to quantize; use fp32")
    encoder = ENCODER_LSTM_INT8 if encoder_lstm is None else encoder_lstm
    if not _lstms_to_rewrite(network, encoder, threshold) and all(m.in_features * m.out_features < threshold
                                                                   for m in linears):
        largest = max([m.in_features * m.out_features for m in linears] + [_gate_weights(m) for m in lstms])
        raise ConfigError(f"precision int8: no layer of this model is big enough for int8 to pay here (the largest "
                          f"has {largest:,} weights, int8 starts at {threshold:,}: smaller products are faster in "
                          "fp32); use fp32")


def _gate_shapes(lstm: nn.LSTM, fused: bool) -> list[tuple[int, int]]:
    """(in, out) of the linear layers `LinearLSTM.from_lstm(lstm, fused)` holds."""
    h = lstm.hidden_size
    sizes = [lstm.input_size] + [h] * (lstm.num_layers - 1)
    return [(n + h, 4 * h) for n in sizes] if fused else [(n, 4 * h) for n in sizes] + [(h, 4 * h)]


@dataclass(frozen=True)
class _Candidates:
    """What `quantize_network` would turn into int8: the linear layers and LSTMs big enough, their shapes."""

    linears: list[nn.Linear]
    lstms: list[tuple[nn.Module, str, bool]]
    shapes: set[tuple[int, int]]
    threshold: int
    keep: set[int]


def _candidates(network: nn.Module, min_weights: int | None, encoder_lstm: bool | None) -> _Candidates:
    threshold = MIN_INT8_WEIGHTS if min_weights is None else min_weights
    keep = restricted_output_layers(network)
    lstms = _lstms_to_rewrite(network, ENCODER_LSTM_INT8 if encoder_lstm is None else encoder_lstm, threshold)
    linears = [m for m in network.modules() if isinstance(m, nn.Linear) and id(m) not in keep
               and m.in_features * m.out_features >= threshold]
    shapes = {(m.in_features, m.out_features) for m in linears}
    for parent, name, fused in lstms:
        shapes |= {s for s in _gate_shapes(getattr(parent, name), fused) if s[0] * s[1] >= threshold}
    return _Candidates(linears, lstms, shapes, threshold, keep)


def _packed_output_layers_win(network: nn.Module, found: _Candidates, plan: Int8Plan) -> set[int]:
    """ids of the output layers (`generator`s) that int8 would run but fp32 runs about as fast as oneDNN's packed
    product (`packed_linear.fp32_output_gain`): the plan timed int8 against nn.Linear, and where fp32 decoding packs
    an output layer that is not the fp32 it has to beat. Such a layer stays fp32, to be packed as in fp32."""
    outputs = {id(m) for parent in network.modules() for name, m in parent.named_children() if name == "generator"}
    wins = set()
    for layer in found.linears:
        if id(layer) not in outputs or layer.weight.dtype != torch.float32:
            continue
        kernel = plan.kernel_for(layer.in_features, layer.out_features)
        row = plan.times.seconds.get(shape_label(layer.in_features, layer.out_features), {})
        timed, fp32 = row.get(kernel) if kernel else None, row.get("fp32")
        if not timed or not fp32:
            continue
        gain = fp32_output_gain(layer.in_features, layer.out_features, MEASURE_ROWS)
        if fp32 / timed < MIN_KERNEL_SPEEDUP * gain:
            log.info("int8: output layer %s left to fp32's packed product (int8 %.2fx nn.Linear's speed here, the "
                     "packed product %.2fx)", shape_label(layer.in_features, layer.out_features), fp32 / timed, gain)
            wins.add(id(layer))
    return wins


def layer_shapes(network: nn.Module, *, min_weights: int | None = None, encoder_lstm: bool | None = None
                 ) -> set[tuple[int, int]]:
    """The (in, out) shapes of the layers `quantize_network` (same arguments) would time and quantize."""
    return _candidates(network, min_weights, encoder_lstm).shapes


def plan_network(network: nn.Module, *, min_weights: int | None = None, encoder_lstm: bool | None = None
                 ) -> Int8Plan:
    """The measured int8 kernel of each layer shape `quantize_network` (same arguments) would quantize
    (`int8_plan`: cached per machine); `check_quantizable` first."""
    check_quantizable(network, min_weights=min_weights, encoder_lstm=encoder_lstm)
    return int8_plan(layer_shapes(network, min_weights=min_weights, encoder_lstm=encoder_lstm))


def quantize_network(network: nn.Module, *, min_weights: int | None = None, kernel: str | None = None,
                     encoder_lstm: bool | None = None) -> int:
    """Quantize `network` for int8 inference **in place** (it is put in eval mode; keep an fp32 copy
    yourself where you need one) and return how many linear layers were quantized.

    Every `nn.Linear` with at least `min_weights` weights (default `MIN_INT8_WEIGHTS`) becomes an
    `Int8Linear` computed by `kernel`, or by default by the kernel measured fastest at its shape here
    where that is at least `MIN_KERNEL_SPEEDUP` times as fast as fp32 (`plan_network`); the others stay
    fp32. LSTM decoders (and, with `encoder_lstm`, default `ENCODER_LSTM_INT8`, BiLSTM encoders) are first
    rewritten as `LinearLSTM`s where each of their gate layers that size gets a kernel (in fp32 the linear
    form is slower than nn.LSTM). The fp32 weights of replaced layers are dropped (a tied embedding keeps
    its table). Raises `ConfigError`, before changing anything, where nothing can be quantized
    (`check_quantizable`) or, measured, no layer gets a kernel that pays (`Int8Plan.refusal`: one line
    with the times)."""
    check_quantizable(network, min_weights=min_weights, encoder_lstm=encoder_lstm)
    found = _candidates(network, min_weights, encoder_lstm)
    chosen: Callable[[int, int], str | None]
    if kernel is not None:
        forced = check_kernel(kernel)
        chosen = lambda n_in, n_out: forced  # noqa: E731
    else:
        plan = int8_plan(found.shapes)
        refusal = plan.refusal()
        if refusal is not None:
            raise ConfigError(refusal)
        chosen = plan.kernel_for
    packed_wins = set() if kernel is not None else _packed_output_layers_win(network, found, plan)
    lstm_pays = any(all(chosen(*g) for g in _gate_shapes(getattr(parent, name), fused)
                        if g[0] * g[1] >= found.threshold) for parent, name, fused in found.lstms)
    if packed_wins and not lstm_pays and all(
            id(m) in packed_wins or chosen(m.in_features, m.out_features) is None for m in found.linears):
        raise ConfigError(f"int8 refused on this CPU ({cpu_model()}, torch {torch.__version__}): the only layers "
                          f"where an int8 kernel pays over nn.Linear are output layers, and fp32 runs them as "
                          f"oneDNN's packed product, which is as fast or nearly (int8 under {MIN_KERNEL_SPEEDUP}x its "
                          "speed); use fp32")
    network.eval()
    for parent, name, fused in found.lstms:
        lstm = getattr(parent, name)
        if all(chosen(*s) for s in _gate_shapes(lstm, fused) if s[0] * s[1] >= found.threshold):
            setattr(parent, name, LinearLSTM.from_lstm(lstm, fused=fused))
    done: dict[int, Int8Linear] = {}
    small, slow = set(), set()
    for parent in list(network.modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, nn.Linear):
                continue
            if id(child) in found.keep or child.in_features * child.out_features < found.threshold:
                small.add(id(child))
                continue
            layer_kernel = chosen(child.in_features, child.out_features)
            if layer_kernel is None or id(child) in packed_wins:
                slow.add(id(child))
                continue
            if id(child) not in done:  # a layer under two names stays one layer
                done[id(child)] = Int8Linear.from_linear(child, layer_kernel)
            setattr(parent, name, done[id(child)])
    used = sorted({q.kernel for q in done.values()})
    log.info("int8: %d linear layer(s) quantized (%s), %d left in fp32 (%d with fewer than %s weights%s, %d where "
             "no int8 kernel is %sx faster than fp32 here)", len(done),
             ", ".join(f"{KERNEL_NAMES[k]}: {sum(q.kernel == k for q in done.values())}" for k in used),
             len(small) + len(slow), len(small), f"{found.threshold:,}",
             " or output rows read per language" if found.keep else "", len(slow), MIN_KERNEL_SPEEDUP)
    return len(done)
