"""`train.compile`: the training forward pass compiled with torch.compile (inductor), where it pays.

What is compiled is `model(batch, ...)` of a training step, the loss computation (and with it, through
autograd, its backward pass): `CompiledForward` wraps the module the steps run through (the network, or
DDP around it) and is called in its place by `step.forward_backward`. It is kept beside the network,
never inside it: checkpoints hold the network's own state dict (no `_orig_mod.` prefix), and
validation, the synthetic pairs' decoding and everything else run the eager network.

The batch's sizes (sentences, source and target length) are symbols (`mark_dynamic`, no duck sizing),
the model's own sizes fixed: one graph serves every batch of a direction. A graph is compiled per
trained direction all the same (the languages choose the modules, so they are part of what a graph is
specialised on), and again where a step takes another path (the agreement term switched on at its
`start_step`, a batch of one sentence, synthetic pairs of another direction). `warm_up` compiles every
trained direction before the first step, outside the step clock, and logs the time; the graphs
compiled are counted and logged when training ends (a d128 shared Transformer of 6 directions: 6
graphs, one each).

Where compiling fails (no C++ compiler, an operator inductor cannot handle) the step runs eagerly from
then on, after one warning line. LSTM kinds graph-break around every `nn.LSTM` call (torch.compile
does not trace the fused RNN kernels), so only the layers between them are compiled, in many small
graphs (22 for one direction of the LSTM attention bridge), whose inputs dynamo takes as fixed-size
until a size changes: `warm_up` therefore also runs each direction in a second shape.

`auto` compiles only where this model's own training steps, timed a few at a time eager and compiled
in turn (compile time excluded), measure at least `MIN_COMPILE_SPEEDUP` times faster compiled; the ratio
is cached as `precision: auto`'s is (`interlingua.precision.cached_speedup`: per CPU model, torch
version, thread count and model configuration), so the next run decides at once.
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from interlingua.precision import cache_path, cached_speedup, measure_speedup, model_workload

if TYPE_CHECKING:
    from interlingua.config import ExperimentConfig
    from interlingua.data.batching import Batch, DirectionBatches
    from interlingua.distributed import Distributed
    from interlingua.modules.model import LossOutput
    from interlingua.runtime import Runtime

log = logging.getLogger(__name__)

MIN_COMPILE_SPEEDUP = 1.1
"""`auto` compiles only where the compiled steps of the model measure at least this much faster."""

RECOMPILE_LIMIT = 256
"""Graphs torch.compile may make of the training forward before it gives up compiling new ones
(its default, 8, is fewer than the directions of a many-to-many run)."""

PROBE_BATCHES = 3
"""Distinct batches `auto`'s measurement cycles through (lengths differ from batch to batch)."""


def _inductor(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    from torch._inductor.compile_fx import compile_fx
    return compile_fx(gm, example_inputs)


inductor_backend: Callable[[torch.fx.GraphModule, list[Any]], Any] = _inductor
"""The torch.compile backend every graph is handed to (a test may stand a failing one in)."""


def compile_errors() -> tuple[type[BaseException], ...]:
    """What a failed compilation raises: dynamo's exceptions (which wrap the backend's) and inductor's."""
    from torch._dynamo.exc import TorchDynamoException
    from torch._inductor.exc import InductorError
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError, GuardOnDataDependentSymNode
    return TorchDynamoException, InductorError, ConstraintViolationError, GuardOnDataDependentSymNode


@contextlib.contextmanager
def compile_settings() -> Iterator[None]:
    """torch.compile's settings for a training forward, for the call only (nothing global changes):
    the loss's masked selection and token count traced into the graph, no specialisation on two sizes
    that happen to be equal, every backward pass compiled with its forward (so that a failure surfaces
    in the call, where it can be caught), and room for a graph per direction."""
    import torch._dynamo.config
    import torch._functorch.config
    import torch.fx.experimental._config
    shapes = torch.fx.experimental._config.patch(use_duck_shape=False)  # type: ignore[attr-defined]
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True, capture_scalar_outputs=True,
                                    recompile_limit=RECOMPILE_LIMIT, accumulated_recompile_limit=4 * RECOMPILE_LIMIT,
                                    automatic_dynamic_local_pgo=False, automatic_dynamic_remote_pgo=False), \
            torch._functorch.config.patch(force_non_lazy_backward_lowering=True), shapes:
        yield


def mark_dynamic(batch: Batch) -> None:
    """Compile the batch's sizes (sentences, source and target length) as symbols from the first graph on,
    not the feature sizes: those are the model's (`dynamic=True` makes every size of every graph input a
    symbol, and symbolic feature sizes after an LSTM's graph break overwhelm the shape reasoning)."""
    from torch._dynamo import maybe_mark_dynamic as mark  # a size a graph needs fixed may still be fixed
    for tensor, dims in ((batch.src, (0, 1)), (batch.src_lengths, (0,)), (batch.tgt_in, (0, 1)),
                         (batch.tgt_out, (0, 1))):
        for dim in dims:
            if tensor.size(dim) > 1:  # 0 and 1 are always specialised on
                mark(tensor, dim)


def counted(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def compiler_failure(err: BaseException) -> str:
    """An exception as one short line (a compiler's errors run over many)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    text = next((line for line in lines if not line.startswith("backend=")), lines[0] if lines else "")
    return f"{type(err).__name__}: {text}"[:240]


class CompiledForward:
    """`module(batch, **loss_terms)` compiled (nothing compiles before the first call); called in place of
    the module in training steps. Falls back to the eager module, for good, where compiling fails."""

    def __init__(self, module: torch.nn.Module):
        self.module = module
        self._compiled = torch.compile(module, backend=self._backend)
        self.failure: str | None = None
        """Why compiling failed (one line); None while it has not."""
        self.graphs = 0
        """Graphs compiled so far."""
        self.compile_seconds = 0.0
        """Time spent in the backend compiling them (tracing not included)."""
        self._agreements: dict[str, Any] = {}

    def _backend(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        t0 = time.perf_counter()
        try:
            compiled = inductor_backend(gm, example_inputs)
        finally:
            self.compile_seconds += time.perf_counter() - t0
        self.graphs += 1  # not a restarted analysis (inductor raises to have a graph traced again)
        return compiled

    def _steady_terms(self, terms: dict[str, Any]) -> dict[str, Any]:
        """The loss terms with the agreement term's weight as a tensor and its config at weight 1 (one object
        per config): a ramped weight, new every step, would otherwise be a new graph every step."""
        agreement = terms.get("agreement")
        if agreement is None:
            return terms
        unit = agreement.model_copy(update={"weight": 1.0})
        key = unit.model_dump_json()
        steady = self._agreements.setdefault(key, unit)
        return {**terms, "agreement": steady, "agreement_weight": torch.tensor(agreement.weight)}

    @property
    def active(self) -> bool:
        """Whether steps still run compiled (no compilation has failed)."""
        return self.failure is None

    def __call__(self, batch: Any, **terms: Any) -> LossOutput:
        if self.failure is None:
            try:
                mark_dynamic(batch)
                with compile_settings():
                    return self._compiled(batch, **self._steady_terms(terms))
            except compile_errors() as err:
                self.failure = compiler_failure(err)
                log.warning("train.compile: compiling the training step failed (%s); training on without "
                            "compiling", self.failure)
        return self.module(batch, **terms)


def warm_up(compiled: CompiledForward | None, batches: Iterable[DirectionBatches], runtime: Runtime,
            terms: dict[str, Any], optimizer: torch.optim.Optimizer) -> None:
    """Compile the training step of every trained direction (its `batches`) before the first step (outside the
    step clock, so a time budget is not spent on it) and log how long it took; `terms`: what the step's
    `model(batch, ...)` takes besides the batch. Nothing the run depends on moves: no weight update, gradients
    dropped, batch positions and random generators put back. Under torchrun every process does the same passes
    (their gradients are exchanged, then dropped)."""
    if compiled is None or not compiled.active:
        return
    t0, graphs = time.perf_counter(), compiled.graphs
    rng, directions = runtime.rng_state(), 0
    try:
        for plan in batches:
            directions += 1
            position = plan.state_dict()
            batch = plan.next().to(runtime.device)
            plan.load_state_dict(position)
            for sample in (batch, other_shape(batch)):
                with runtime.autocast():
                    out = compiled(sample, **terms)
                out.loss.backward()
                optimizer.zero_grad(set_to_none=True)
                if not compiled.active:
                    return
    finally:
        runtime.set_rng_state(rng)
    log.info("compiled the training step in %.0f s (%s for %s)", time.perf_counter() - t0,
             counted(compiled.graphs - graphs, "graph"), counted(directions, "direction"))


def other_shape(batch: Batch) -> Batch:
    """`batch` in another shape: its first half (at least two sentences where it has them), one padding
    column wider on both sides. Compiled after `batch`, it makes every size that varies a symbol in the
    graphs after a graph break too (whose inputs dynamo takes as fixed-size until a size changes), so
    that no step of the run itself compiles for a new shape, and the graphs a run's steps use do not
    depend on where it started (a resumed run's are its uninterrupted twin's)."""
    from interlingua.data.vocab import PAD
    rows = max(min(2, len(batch.src)), len(batch.src) // 2)

    def wider(ids: torch.Tensor) -> torch.Tensor:
        return torch.cat([ids[:rows], ids.new_full((rows, 1), PAD)], 1)

    return replace(batch, src=wider(batch.src), src_lengths=batch.src_lengths[:rows], tgt_in=wider(batch.tgt_in),
                   tgt_out=wider(batch.tgt_out))


class _CompileFailed(Exception):
    """`auto`'s measurement could not compile the model (already warned about)."""


def compile_probe(compiled: CompiledForward, network: torch.nn.Module, batches: DirectionBatches,
                  runtime: Runtime, loss_options: dict[str, Any], steps: int = 4) -> Callable[[], float]:
    """A measurement for `resolve_compile`: eager step time / compiled step time of `network`'s training
    step (forward with `loss_options` under the run's autocast, backward) on the next batches of
    `batches`. The batches are compiled for first, and that time is logged, not measured. Nothing the
    run depends on moves (see `warm_up`)."""

    def probe() -> float:
        position, rng = batches.state_dict(), runtime.rng_state()
        sample = [batches.next().to(runtime.device) for _ in range(PROBE_BATCHES)]
        batches.load_state_dict(position)
        cycles = {"eager": itertools.cycle(sample), "compiled": itertools.cycle(sample)}

        def step(kind: str) -> None:
            with runtime.autocast():
                out = (compiled if kind == "compiled" else network)(next(cycles[kind]), **loss_options)
            out.loss.backward()
            network.zero_grad(set_to_none=True)
            if runtime.device.type == "cuda":
                torch.cuda.synchronize(runtime.device)

        try:
            t0 = time.perf_counter()
            for _ in sample:
                step("compiled")
            if not compiled.active:
                raise _CompileFailed
            log.info("compiled the training step in %.0f s (%s) to time it", time.perf_counter() - t0,
                     counted(compiled.graphs, "graph"))
            return measure_speedup(step, steps, pair=("eager", "compiled"))
        finally:
            runtime.set_rng_state(rng)

    return probe


def compile_workload(model_config: dict[str, Any], vocab_sizes: dict[str, int], batch_size: int,
                     runtime: Runtime) -> str:
    """The cache name of a model's compiled speed-up: the model's workload, on this device and precision."""
    workload = model_workload(model_config, vocab_sizes, batch_size)
    return f"the training step of {workload} ({runtime.device.type} {runtime.precision})"


def resolve_compile(requested: bool | str, probe: Callable[[], float], workload: str) -> bool:
    """Whether to compile the training step: as `requested`, or for `auto` where `workload`'s compiled
    steps (timed by `probe`, or the cached ratio of an earlier run) are at least `MIN_COMPILE_SPEEDUP`
    times faster here. A measurement that cannot compile decides for eager (and is not cached)."""
    if requested != "auto":
        return bool(requested)
    try:
        speedup = cached_speedup(workload, probe, what="compiling")
    except _CompileFailed:
        return False
    choice = speedup >= MIN_COMPILE_SPEEDUP
    log.info("train.compile auto -> %s (compiled, %s ran at %.2fx the speed of eager here; cached in %s)",
             "compiled" if choice else "eager", workload, speedup, cache_path())
    return choice


def compiled_forward(cfg: ExperimentConfig, dist: Distributed, network: torch.nn.Module, trained: torch.nn.Module,
                     batches: DirectionBatches, runtime: Runtime, terms: dict[str, Any],
                     vocab_sizes: dict[str, int]) -> CompiledForward | None:
    """What `train.compile` makes of a built run: None (eager steps), or the compiled forward of `trained` (the
    `network`, or DDP around it). `auto` is decided on rank 0 (the others take its answer), by `resolve_compile`,
    timing steps of `batches` (one direction's plan) with `terms`."""
    requested = cfg.train.compile
    if requested is False:
        return None
    if requested == "auto":
        measured: CompiledForward | None = None
        chosen = None
        if dist.is_main:
            measured = CompiledForward(network)
            probe = compile_probe(measured, network, batches, runtime, terms)
            chosen = resolve_compile("auto", probe, compile_workload(cfg.model.model_dump(mode="json"), vocab_sizes,
                                                                     cfg.train.batch_size, runtime))
        decided = dist.broadcast(chosen)
        if not decided:
            return None
        if measured is not None and trained is network:
            return measured  # the graphs the measurement compiled serve the training steps
    return CompiledForward(trained)
