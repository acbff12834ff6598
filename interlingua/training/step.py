"""One training step's passes: the step's batch cut into this process's parts, and their gradients.

Under torchrun every process draws the same step batch (the direction scheduler and batch plans
are seeded alike) and trains on its own part of it (`shard`); DDP adds the parts' gradients,
which are scaled so that they equal the whole batch's. The training state is therefore the same
for any number of processes: a run resumes with more or fewer of them.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

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


def micro_batches(run: Run, direction: Direction) -> tuple[list[MicroBatch], int]:
    """This process's passes of one step, and the whole step's source + target tokens.

    The step's batch (the same on every process) is cut into processes x `train.accumulate`
    parts; this process takes parts rank, rank + processes, ... With `both_directions` each
    part is also trained the other way round (paper 003's cost(a->b) + cost(b->a))."""
    tc = run.cfg.train
    batches = run.batches[direction]
    idx = batches.next_indices()
    world, parts = run.dist.world_size, run.dist.world_size * tc.accumulate
    s, t = direction
    sides = (False, True) if tc.both_directions else (False,)
    whole = {rev: batches.target_tokens(idx, reverse=rev) for rev in sides}
    micro = []
    for m in range(tc.accumulate):
        part = shard(idx, parts, m * world + run.dist.rank)
        filler = len(part) == 0
        part = idx[:1] if filler else part
        made = (batches.batch_both_ways(part, run.prefix(t, s), run.start(s)) if tc.both_directions
                else (batches.batch(part),))
        for rev, batch in zip(sides, made):
            batch = replace(batch, filler=True) if filler else batch
            scale = (0.0 if filler else 1.0 if parts == 1
                     else world * batches.target_tokens(part, reverse=rev) / whole[rev])
            micro.append(MicroBatch(batch, scale))
    return micro, batches.tokens(idx) * len(sides)


def forward_backward(run: Run, micro: list[MicroBatch]) -> list[float]:
    """Gradients of the step's loss from this process's passes (DDP exchanges them after the
    last one only); returns this process's NLL sum, target tokens, penalty sum, sentences, agreement
    loss sum and the sentences it was computed for."""
    terms = run.loss_terms()
    trained = run.trained if run.trained is not None else run.model
    nll = n_tgt = penalty = sentences = agreement = agreed = 0.0
    for i, mb in enumerate(micro):
        with no_sync(trained, skip=i < len(micro) - 1):
            with run.runtime.autocast():
                out = trained(mb.batch.to(run.runtime.device), **terms)
            loss = out.loss if mb.scale == 1.0 else out.loss * mb.scale
            (run.scaler.scale(loss) if run.scaler else loss).backward()
        if mb.scale:
            n = mb.batch.src.size(0)
            nll, n_tgt = nll + out.nll_sum, n_tgt + out.n_tokens
            penalty, sentences = penalty + out.penalty * n, sentences + n
            agreement, agreed = agreement + out.agreement, agreed + out.agreement_sentences
    return [nll, n_tgt, penalty, sentences, agreement, agreed]


@dataclass
class StepStart:
    """What a step changes before it updates the weights (cheap to copy every step), so that a step
    stopped part-way is undone: which direction comes next, the batch positions, the RNG."""

    scheduler: dict[str, Any]
    batches: dict[Direction, dict[str, Any]]
    torch_rng: Any

    @classmethod
    def of(cls, run: Run) -> StepStart:
        return cls(run.scheduler.state_dict(), {d: b.state_dict() for d, b in run.batches.items()},
                   run.runtime.rng_state())

    def rewind(self, run: Run) -> None:
        run.scheduler.load_state_dict(self.scheduler)
        for d, b in run.batches.items():
            if b.state_dict() != self.batches[d]:
                b.load_state_dict(self.batches[d])
        run.runtime.set_rng_state(self.torch_rng)
        run.optimizer.zero_grad(set_to_none=True)
