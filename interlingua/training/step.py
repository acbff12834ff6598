"""One training step's passes: the step's batch cut into this process's parts, and their gradients.

Under torchrun every process draws the same step batch (the direction scheduler and batch plans
are seeded alike) and trains on its own part of it (`shard`); DDP adds the parts' gradients,
which are scaled so that they equal the whole batch's. The training state is therefore the same
for any number of processes: a run resumes with more or fewer of them.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from interlingua.data.batching import Batch, shard
from interlingua.data.directions import Direction
from interlingua.distributed import no_sync
from interlingua.training.run import Run


@dataclass
class MicroBatch:
    """One forward + backward pass of a step: a part of the step's batch on this process."""

    batch: Batch
    scale: float
    """What the batch's loss (a mean over its target tokens) is multiplied by, so that the parts'
    gradients add up to those of the whole batch's mean loss: the part's share of the batch's
    target tokens, times the number of processes (DDP averages over them); 1 for a whole batch,
    0 for a filler (a process whose part came out empty still joins the gradient exchange)."""
    synthetic: bool = False
    """Made by the model (`train.synthetic`): its loss is logged apart from the real pairs'."""
    agreement: bool = True
    """Whether the agreement term (`train.agreement`, where on) is computed for this pass."""


@dataclass
class StepSums:
    """A step's loss terms summed over its passes (on one process, or over all of them)."""

    nll: float = 0.0
    target_tokens: float = 0.0
    penalty: float = 0.0
    """The penalty summed over the sentences."""
    sentences: float = 0.0
    agreement: float = 0.0
    agreed: float = 0.0
    """Sentences the agreement loss was computed for."""
    synthetic_nll: float = 0.0
    synthetic_tokens: float = 0.0

    def values(self) -> list[float]:
        return [getattr(self, f.name) for f in fields(self)]

    @classmethod
    def of(cls, values: list[float]) -> StepSums:
        return cls(*values[:len(fields(cls))])


StepPart = tuple[Direction, np.ndarray]
"""A direction and the sentence-pair indices of its batch in a step (the whole step's, before any split)."""


def step_parts(run: Run) -> list[StepPart]:
    """The step's batch: the next direction's next batch, or with `train.batch_tokens` a batch of each
    direction the direction scheduler rotates over, in the order of its rotation (a whole cycle a step)."""
    count = len(run.batches) if run.cfg.train.batch_tokens is not None else 1
    parts = []
    for _ in range(count):
        direction = run.direction_scheduler.next()
        parts.append((direction, run.batches[direction].next_indices()))
    return parts


def micro_batches(run: Run, step: list[StepPart]) -> tuple[list[MicroBatch], int]:
    """This process's passes of one step, and the whole step's source + target tokens.

    Each direction's batch of the step (the same on every process) is cut into processes x
    `train.accumulate` parts; this process takes parts rank, rank + processes, ..., one pass per
    part and direction. A pass's loss is weighted by its share of the step's target tokens, so the
    step trains on the mean over all of them. With `both_directions` each part is also trained the
    other way round (paper 003's cost(a->b) + cost(b->a)), each way weighted on its own."""
    tc = run.cfg.train
    world, parts = run.dist.world_size, run.dist.world_size * tc.accumulate
    sides = (False, True) if tc.both_directions else (False,)
    whole = {rev: sum(run.batches[d].target_tokens(idx, reverse=rev) for d, idx in step) for rev in sides}
    micro = []
    for m in range(tc.accumulate):
        for (s, t), idx in step:
            batches = run.batches[(s, t)]
            part = shard(idx, parts, m * world + run.dist.rank)
            filler = len(part) == 0
            part = idx[:1] if filler else part
            made = (batches.batch_both_ways(part, run.prefix(t, s), run.start(s)) if tc.both_directions
                    else (batches.batch(part),))
            for rev, batch in zip(sides, made):
                batch = replace(batch, filler=True) if filler else batch
                # a whole batch (one process, one part, one direction) gets exactly 1.0: n / n
                scale = 0.0 if filler else world * batches.target_tokens(part, reverse=rev) / whole[rev]
                micro.append(MicroBatch(batch, scale))
    return micro, sum(run.batches[d].tokens(idx) for d, idx in step) * len(sides)


def forward_backward(run: Run, micro: list[MicroBatch]) -> StepSums:
    """Gradients of the step's loss from this process's passes (DDP exchanges them after the
    last one only), and this process's sums of the step's loss terms."""
    terms = run.loss_terms()
    without_agreement = {**terms, "agreement": None}
    trained = run.trained if run.trained is not None else run.network
    forward = run.compiled if run.compiled is not None else trained  # `train.compile`
    sums = StepSums()
    for i, mb in enumerate(micro):
        with no_sync(trained, skip=i < len(micro) - 1):
            # a distillation batch runs eagerly: its soft targets, a size of their own, would be new graphs
            through = trained if mb.batch.soft_targets is not None else forward
            with run.runtime.autocast():
                out = through(mb.batch.to(run.runtime.device), **(terms if mb.agreement else without_agreement))
            loss = out.loss if mb.scale == 1.0 else out.loss * mb.scale
            (run.scaler.scale(loss) if run.scaler else loss).backward()
        if not mb.scale:
            continue
        if mb.synthetic:
            sums.synthetic_nll += out.nll_sum
            sums.synthetic_tokens += out.n_tokens
            continue
        n = mb.batch.src.size(0)
        sums.nll, sums.target_tokens = sums.nll + out.nll_sum, sums.target_tokens + out.n_tokens
        sums.penalty, sums.sentences = sums.penalty + out.penalty * n, sums.sentences + n
        sums.agreement, sums.agreed = sums.agreement + out.agreement, sums.agreed + out.agreement_sentences
    return sums


@dataclass
class StepStart:
    """What a step changes before it updates the weights (cheap to copy every step), so that a step
    stopped part-way is undone: which direction comes next, the batch positions, the RNG."""

    direction_scheduler: dict[str, Any]
    batches: dict[Direction, dict[str, Any]]
    torch_rng: Any

    @classmethod
    def of(cls, run: Run) -> StepStart:
        return cls(run.direction_scheduler.state_dict(), {d: b.state_dict() for d, b in run.batches.items()},
                   run.runtime.rng_state())

    def rewind(self, run: Run) -> None:
        run.direction_scheduler.load_state_dict(self.direction_scheduler)
        for d, b in run.batches.items():
            if b.state_dict() != self.batches[d]:
                b.load_state_dict(self.batches[d])
        run.runtime.set_rng_state(self.torch_rng)
        run.optimizer.zero_grad(set_to_none=True)
