"""The decoders' fp32 output layer at inference through oneDNN's prepacked linear, where that measures faster here.

A decoding step's output layer (`generator`: d_model -> vocabulary) is its biggest product: in the
zero-resource Transformer (d 128, vocabulary 8,000, greedy, 1 thread) `addmm` took 58% of the time. PyTorch's
default fp32 linear multiplies with MKL's `addmm` on the weight as it is stored; oneDNN's fp32 linear can
reorder the weight once into its own blocked layout (`torch.ops.mkldnn._reorder_linear_weight`, what
`torch.compile` does for frozen CPU linears) and then multiply with it (`torch.ops.mkldnn._linear_pointwise`).
On an AMD EPYC (AVX512, no AMX; torch 2.13, 1 thread, a busy machine) that ran 1.5-2.9x as fast as addmm at
128x8000 for 1-128 rows and 0.9-1.3x at 320; at 25k weights (64x400) 0.4-1.0x, at 128k-512k weights 0.7-2.5x
depending on the rows. Its products were those of addmm to 1e-6, most often bit for bit.

`PackedLinear` stands in for such an output layer: an `nn.Linear` holding the very `weight` and `bias`
Parameters of the layer it replaces (a tied embedding stays tied and is never modified; code that reads or
slices `generator.weight`, the per-language output rows of `modules.outputs` and the lexical shortlist of
`modules.shortlist_decoding`, reads it as before), plus the packed copy, made once and again only if the
weight changes in place (its version counter) or is replaced. Its product goes through the packed copy only
at inference (eval mode, no gradient, fp32 on the CPU, no autocast) and only at the row counts its plan
says (`PackedPlan`); everything else, training above all, is `nn.Linear`'s.

Whether and at which row counts it pays is measured on the machine, never assumed (`packed_plan`), as the
int8 kernels are (`modules.kernel_timing` times and caches both): the layer's shape is timed with both products
at `PACKED_ROWS` rows (a decoding step of one sentence, of a small batch, greedy at the default batch 64,
beam 5 at batch 64), interleaved, the fastest call kept; a row count gets the packed product where it is at
least `MIN_PACKED_SPEEDUP` times as fast, and a call of n rows follows the measured row count nearest to n
(on a log scale). The answer is cached in precision.json per CPU model, flags, torch version, thread count
and shape; one measured while the machine was busy is used and taken again once it is quieter. Layers under
`MIN_PACKED_WEIGHTS` are not even timed.

`interlingua.load` applies it to fp32 models on the CPU (`pack_output_layers`); the environment variable
`INTERLINGUA_OUTPUT_KERNEL` (`OUTPUT_KERNELS`) says `auto` (default: measured), `default` (off: nn.Linear
throughout) or `packed` (at every row count, without measuring, where the kernel works). Where the kernel
is missing (a torch built without oneDNN, a CPU other than x86) or gives wrong products, the layers stay
as they are, without a word above the debug log.
"""
from __future__ import annotations

import functools
import logging
import math
import os
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from interlingua.errors import ConfigError
from interlingua.modules.kernel_timing import (
    KernelTimes,
    cached_times,
    fastest_calls,
    first_calls,
    random_linear,
    shape_label,
)
from interlingua.modules.linear import Linear
from interlingua.precision import cpu_flags, machine_key

log = logging.getLogger(__name__)

OUTPUT_KERNEL_ENV = "INTERLINGUA_OUTPUT_KERNEL"
OUTPUT_KERNELS = ("auto", "default", "packed")
"""What `INTERLINGUA_OUTPUT_KERNEL` may say: `auto` (the default) packs an fp32 output layer on the CPU where
measured faster, at the row counts where it is; `default` never packs; `packed` packs at every row count
without measuring (for comparisons), where the kernel works."""

PACKED_ROWS = (1, 8, 64, 320)
"""Row counts at which a layer shape is timed: one sentence (the service), a small batch, one greedy step of
a batch of 64 (`translate`'s default), one beam-5 step of it. Search drops finished sentences, so steps run at
every count in between too: each takes the decision of the nearest of these (log scale)."""

MIN_PACKED_SPEEDUP = 1.1
"""The packed product is used at a row count only where it is at least this much faster than nn.Linear's, the
margin int8 and bf16 need (`modules.int8.MIN_KERNEL_SPEEDUP`), so that timing noise never picks it where it
does not pay."""

MIN_PACKED_WEIGHTS = 100_000
"""Output layers with fewer weights (in x out) are neither timed nor packed: at 25k weights (64x400) the packed
product took up to 2.5x addmm's time (its fixed cost per call, ~10 us, is most of such a product), from 128k it
was 1.1x faster at 8 rows and more. It also keeps the tiny models of the tests from measuring anything."""

PACK_ROWS_HINT = 64
"""The row count the weight's layout is chosen for (`_reorder_linear_weight`'s batch size): 1, 64 and 320 gave
the same speed within noise at 1-320 rows, 1 a slower one at 8 rows."""

PACKED = "packed"
"""The name of the packed product in the measurements (`KernelTimes`; "fp32" is nn.Linear's)."""


def _pack(weight: torch.Tensor) -> torch.Tensor:
    """oneDNN's copy of an (out, in) fp32 weight in its blocked layout (an opaque mkldnn tensor)."""
    with torch.no_grad():
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACK_ROWS_HINT)


def _packed_product(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x (rows, in) fp32 -> x W^T + b (rows, out) with the packed weight."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


@functools.cache
def packed_kernel_works() -> bool:
    """Whether oneDNN's packed fp32 linear exists in this torch build, on this CPU (x86: measured there only),
    and gives nn.Linear's products here."""
    if platform.machine().lower() not in ("x86_64", "amd64", "i686", "x86"):
        return False
    try:
        if not torch.backends.mkldnn.is_available():
            return False
        gen = torch.Generator().manual_seed(0)
        weight, bias, x = (torch.randn(24, 40, generator=gen), torch.randn(24, generator=gen),
                           torch.randn(5, 40, generator=gen))
        got = _packed_product(x, _pack(weight), bias)
    except Exception as err:  # noqa: BLE001 - a missing op or an unsupported CPU: nn.Linear it is
        log.debug("oneDNN's packed fp32 linear is unavailable: %s", err)
        return False
    return bool(got.shape == (5, 24) and torch.allclose(got, F.linear(x, weight, bias), rtol=1e-4, atol=1e-5))


def rows_label(n_in: int, n_out: int, rows: int) -> str:
    """A measured case as the cache names it: 'in x out at N rows'."""
    return f"{shape_label(n_in, n_out)} at {rows} rows"


@dataclass(frozen=True)
class PackedPlan:
    """At which of the measured row counts `rows` the packed product runs (`packed`, one flag each), from
    `times` (None: not measured, as forced)."""

    rows: tuple[int, ...]
    packed: tuple[bool, ...]
    times: KernelTimes | None = None
    cached: bool = False

    @classmethod
    def from_times(cls, times: KernelTimes, n_in: int, n_out: int, rows: Sequence[int] = PACKED_ROWS,
                   cached: bool = False) -> PackedPlan:
        """Packed at each row count where it measured at least `MIN_PACKED_SPEEDUP` times as fast as nn.Linear."""
        flags = []
        for r in rows:
            row = times.seconds.get(rows_label(n_in, n_out, r), {})
            default, packed = row.get("fp32"), row.get(PACKED)
            flags.append(bool(default and packed and default / packed >= MIN_PACKED_SPEEDUP))
        return cls(tuple(rows), tuple(flags), times, cached)

    @classmethod
    def always(cls) -> PackedPlan:
        """Packed at every row count (not measured)."""
        return cls((1,), (True,))

    @property
    def pays(self) -> bool:
        """Whether any row count gets the packed product."""
        return any(self.packed)

    def packed_for(self, rows: int) -> bool:
        """Whether a product of `rows` rows runs packed: the decision of the measured row count nearest to it
        on a log scale (ties: the smaller)."""
        if rows < 1:
            return False
        nearest = min(range(len(self.rows)), key=lambda i: (abs(math.log(rows / self.rows[i])), self.rows[i]))
        return self.packed[nearest]

    def describe(self) -> str:
        """e.g. 'packed at 1, 8, 64 rows, nn.Linear at 320'."""
        on = [str(r) for r, p in zip(self.rows, self.packed) if p]
        off = [str(r) for r, p in zip(self.rows, self.packed) if not p]
        if self.times is None and self.pays and not off:
            return "packed at every row count"
        return (f"packed at {', '.join(on) or 'no'} rows" + (f", nn.Linear at {', '.join(off)}" if off else ""))


def time_packed(n_in: int, n_out: int, rows: Sequence[int] = PACKED_ROWS) -> KernelTimes:
    """Seconds per call of nn.Linear ("fp32") and of the packed product (`PACKED`) at (in, out), for `rows`
    rows of random inputs each (`kernel_timing.first_calls`, then `fastest_calls`: interleaved rounds, the
    fastest call kept)."""
    gen = torch.Generator().manual_seed(0)
    linear = random_linear(n_in, n_out, gen).eval()
    variants = {"fp32": linear, PACKED: PackedLinear(linear, PackedPlan.always())}
    times = KernelTimes({})
    with torch.inference_mode():
        for r in rows:
            x = torch.randn(r, n_in, generator=gen)
            best = fastest_calls(variants, x, first_calls(variants, x))
            times.seconds[rows_label(n_in, n_out, r)] = {name: float(f"{t:.4g}") for name, t in best.items()}
    return times


def _flags() -> list[str]:
    """The vector instructions of this CPU that oneDNN's and MKL's fp32 products use (part of the cache key)."""
    found = cpu_flags()
    return [f for f in ("avx2", "avx512f", "amx_tile") if f in found]


def packed_plan(n_in: int, n_out: int) -> PackedPlan:
    """The measured plan of an (in, out) output layer: from precision.json where this CPU model, its flags,
    torch version and thread count have timed the shape before, else timed now (`time_packed`, a fraction of
    a second) and cached."""
    labels = [rows_label(n_in, n_out, r) for r in PACKED_ROWS]
    key = machine_key(_flags(), f"packed fp32 linear at rows {','.join(map(str, PACKED_ROWS))}: "
                                 f"{shape_label(n_in, n_out)}")

    def measure() -> KernelTimes:
        log.info("timing oneDNN's packed fp32 linear against nn.Linear at the output layer's shape %s (once per "
                 "machine)", shape_label(n_in, n_out))
        return time_packed(n_in, n_out)

    def summary(times: KernelTimes) -> dict[str, Any]:
        return {PACKED: PackedPlan.from_times(times, n_in, n_out).describe()}

    times, cached = cached_times(key, labels, measure, "the packed output layer", summary)
    return PackedPlan.from_times(times, n_in, n_out, cached=cached)


def _version(tensor: torch.Tensor) -> int:
    try:
        return tensor._version
    except RuntimeError:  # a tensor made in inference mode tracks no version
        return -1


class PackedLinear(nn.Linear):
    """An output layer whose inference products run through oneDNN's packed fp32 weight where `plan` says
    (see the module's docstring); `weight` and `bias` are the replaced layer's own Parameters."""

    def __init__(self, linear: nn.Linear, plan: PackedPlan):
        nn.Module.__init__(self)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        if linear.bias is None:
            self.register_parameter("bias", None)
        else:
            self.bias = linear.bias
        self.plan = plan
        self._decisions: dict[int, bool] = {}
        self._packed: torch.Tensor | None = None
        self._packed_of: tuple[int, int] | None = None
        self.train(linear.training)

    def _packed_weight(self) -> torch.Tensor:
        """The packed copy of the weight as it is now (packed again where it was changed in place or replaced)."""
        of = (self.weight.data_ptr(), _version(self.weight))
        if self._packed is None or self._packed_of != of:
            self._packed, self._packed_of = _pack(self.weight), of
        return self._packed

    def uses_packed(self, x: torch.Tensor) -> bool:
        """Whether `forward(x)` runs the packed product: inference in fp32 on the CPU, at a row count the plan packs."""
        if (self.training or x.device.type != "cpu" or x.dtype != torch.float32 or self.weight.dtype != torch.float32
                or self.weight.device.type != "cpu" or torch.is_autocast_enabled("cpu")):
            return False
        if torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad
                                        or (self.bias is not None and self.bias.requires_grad)):
            return False
        rows = x.numel() // max(self.in_features, 1)
        decision = self._decisions.get(rows)
        if decision is None:
            decision = self._decisions[rows] = self.plan.packed_for(rows)
        return decision

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.uses_packed(x):
            return F.linear(x, self.weight, self.bias)
        y = _packed_product(x.reshape(-1, self.in_features), self._packed_weight(), self.bias)
        return y.view(*x.shape[:-1], self.out_features)

    def __getstate__(self) -> dict[str, Any]:
        """Copies and pickles leave the packed copy out (oneDNN's tensor has no storage to copy): packed again
        on first use."""
        state = self.__dict__.copy()
        state["_packed"], state["_packed_of"] = None, None
        return state

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, {self.plan.describe()}"


def restricted_output_layers(network: nn.Module) -> set[int]:
    """ids of output layers whose rows are read one language's slice at a time (`TranslationNetwork.output_rows`,
    an extended shared model): they need their fp32 weight and stay as they are."""
    rows = getattr(network, "output_rows", None)
    decoder_for = getattr(network, "decoder_for", None)
    if not rows or decoder_for is None:
        return set()
    return {id(decoder_for(lang).generator) for lang in rows}


def fp32_output_gain(n_in: int, n_out: int, rows: Sequence[int]) -> float:
    """How many times faster fp32 decoding runs an (in, out) output layer than nn.Linear over `rows` rows (one call
    at each count, added up), given how `pack_output_layers` packs it here: 1.0 where it is not packed (the
    kernel off or not working, a layer under `MIN_PACKED_WEIGHTS`), else from the packed plan's measurement (the
    cached one, or measured now; with the kernel forced, `packed`, packed at every row count). What int8 must beat
    at an output layer is this product, not nn.Linear."""
    setting = output_kernel_setting()
    if setting == "default" or not packed_kernel_works() or (setting == "auto" and n_in * n_out < MIN_PACKED_WEIGHTS):
        return 1.0
    plan = packed_plan(n_in, n_out)
    seconds = plan.times.seconds if plan.times is not None else {}
    linear = best = 0.0
    for r in rows:
        row = seconds.get(rows_label(n_in, n_out, r), {})
        default, packed = row.get("fp32"), row.get(PACKED)
        if not default:
            return 1.0  # not measured at this row count
        linear += default
        best += packed if packed and (setting == "packed" or plan.packed_for(r)) else default
    return linear / best


def output_kernel_setting() -> str:
    """`INTERLINGUA_OUTPUT_KERNEL` (default `auto`), checked against `OUTPUT_KERNELS`."""
    value = (os.environ.get(OUTPUT_KERNEL_ENV) or "auto").strip().lower()
    if value not in OUTPUT_KERNELS:
        raise ConfigError(f"{OUTPUT_KERNEL_ENV}={value!r}: use one of {', '.join(OUTPUT_KERNELS)}")
    return value


def pack_output_layers(network: nn.Module, kernel: str = "auto") -> int:
    """Replace, in place, the fp32 CPU output layers (`generator`) of `network`'s decoders by `PackedLinear`s
    where oneDNN's packed product pays (`kernel` auto: `packed_plan`, for layers of at least
    `MIN_PACKED_WEIGHTS` weights), or at every row count (`packed`), or nowhere (`default`); returns how many
    layers were packed. Output layers whose rows are read one language's slice at a time (an extended shared
    model's) stay as they are, and so does everything where the kernel does not work here. For inference:
    training a packed layer computes as nn.Linear."""
    if kernel not in OUTPUT_KERNELS:
        raise ValueError(f"kernel: use one of {', '.join(OUTPUT_KERNELS)}, got {kernel!r}")
    if kernel == "default":
        return 0
    keep = restricted_output_layers(network)
    owners = [(module, child) for module in network.modules() for name, child in module.named_children()
              if name == "generator" and isinstance(child, nn.Linear) and type(child) in (nn.Linear, Linear)
              and id(child) not in keep and child.weight.device.type == "cpu" and child.weight.dtype == torch.float32]
    if not owners or not packed_kernel_works():
        return 0
    done: dict[int, PackedLinear | None] = {}  # a layer under several decoders is packed once
    plans: dict[tuple[int, int], PackedPlan] = {}  # one decoder per language: each shape's plan read and said once
    for owner, layer in owners:
        if id(layer) not in done:
            done[id(layer)] = _packed_layer(layer, kernel, plans)
        packed = done[id(layer)]
        if packed is not None:
            owner.generator = packed
    return sum(p is not None for p in done.values())


def _packed_layer(layer: nn.Linear, kernel: str, plans: dict[tuple[int, int], PackedPlan]) -> PackedLinear | None:
    """`layer` packed as `kernel` (auto or packed) says, or None where it stays as it is; `plans`: the plans of the
    shapes met so far in this network (measured or read from the cache, and logged, once a shape)."""
    if kernel == "packed":
        plan = PackedPlan.always()
    elif layer.in_features * layer.out_features < MIN_PACKED_WEIGHTS:
        return None
    else:
        shape = (layer.in_features, layer.out_features)
        if shape not in plans:
            plans[shape] = packed_plan(*shape)
            log.info("output layer %s: %s here", shape_label(*shape), plans[shape].describe())
        plan = plans[shape]
        if not plan.pays:
            return None
    packed = PackedLinear(layer, plan)
    packed._packed_weight()  # packed now rather than at the first step
    return packed


def packed_output_layers(network: nn.Module) -> list[PackedLinear]:
    """The `PackedLinear` output layers of `network` (each once)."""
    return list({id(m): m for m in network.modules() if isinstance(m, PackedLinear)}.values())
