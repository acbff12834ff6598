"""Time the model about to be trained in fp32 and in bf16, so `precision: auto` is decided by it.

A synthetic probe does not predict a real model: on one AMD EPYC with AVX512-BF16 a single
Transformer layer ran 1.3x faster in bf16 while our whole Transformer trained at 0.67-0.9x. So
the trainer times its own model's forward and backward passes, on its own first batches, in both
precisions. Nothing the run depends on moves: there is no weight update, the gradients are
dropped, and the batches' position and the random generators are put back.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import torch

from interlingua.config import ExperimentConfig
from interlingua.data.batching import DirectionBatches
from interlingua.modules.model import TranslationNetwork
from interlingua.precision import autocast, measure_speedup, model_workload
from interlingua.runtime import Runtime, resolve_device_precision

PROBE_BATCHES = 3
"""Distinct batches the probe cycles through (lengths differ from batch to batch)."""


def model_bf16_probe(network: TranslationNetwork, batches: DirectionBatches, device: torch.device,
                     loss_options: dict[str, Any], rng_state: Callable[[], Any],
                     set_rng_state: Callable[[Any], None], steps: int = 4) -> Callable[[], float]:
    """A probe for `precision.resolve_precision`: fp32 / bf16 time of `network`'s training step
    (forward with `loss_options`, backward) on the next batches of `batches`."""

    def probe() -> float:
        position, rng = batches.state_dict(), rng_state()
        sample = [batches.next().to(device) for _ in range(PROBE_BATCHES)]
        batches.load_state_dict(position)
        cycle = itertools.cycle(sample)

        def step(precision: str) -> None:
            with autocast(precision):
                out = network(next(cycle), **loss_options)
            out.loss.backward()
            network.zero_grad(set_to_none=True)

        try:
            return measure_speedup(step, steps)
        finally:
            set_rng_state(rng)

    return probe


def auto_precision(cfg: ExperimentConfig, network: TranslationNetwork, batches: DirectionBatches, runtime: Runtime,
                   loss_options: dict[str, Any], vocab_sizes: dict[str, int]) -> str:
    """What `precision: auto` trains in here: bf16 only where this model's own steps measure faster in it."""
    probe = model_bf16_probe(network, batches, runtime.device, loss_options, runtime.rng_state, runtime.set_rng_state)
    workload = model_workload(cfg.model.model_dump(mode="json"), vocab_sizes, cfg.train.batch_size)
    return resolve_device_precision("auto", runtime.device, probe, workload)
