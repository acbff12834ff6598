"""The agreement term of `train.agreement`: how far apart a sentence and its translation lie in the
shared layer, per sentence of a batch.

The vectors come from `TranslationNetwork._agreement_vector` (the sentence vector, one vector per bridge
head, or a chosen encoder layer's masked mean); this module only compares them. Contrastive loss takes
its negatives from the pass's batch (one direction's; see `train.agreement.loss`): under torchrun every
process's rows are gathered (with their gradients, `torch.distributed.nn.functional.all_gather`), so two
processes compute what one would.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

LOSSES = ("contrastive", "cosine", "mse")


def agreement_losses(src: torch.Tensor, tgt: torch.Tensor, loss: str, temperature: float = 0.1,
                     gather: bool = True, negatives: str = "translations") -> torch.Tensor:
    """Per-sentence losses (batch,) between `src` and `tgt`, both (batch, d) or (batch, heads, d), fp32.

    cosine: 1 - cos; mse: mean squared difference (both 0 for identical vectors, averaged over heads);
    contrastive: symmetric InfoNCE, the translation against every other one of the step batch
    (`gather`: on every process; `negatives` "both": also against the other sentences of the same
    language), cosines divided by `temperature`, averaged over both ways."""
    src, tgt = src.float(), tgt.float()
    if loss == "cosine":
        return (1 - F.cosine_similarity(src, tgt, dim=-1)).reshape(len(src), -1).mean(1)
    if loss == "mse":
        return (src - tgt).pow(2).reshape(len(src), -1).mean(1)
    if loss == "contrastive":
        return _info_nce(src, tgt, temperature, gather, negatives == "both")
    raise ValueError(f"unknown agreement loss {loss!r}; known: {', '.join(LOSSES)}")


def _info_nce(src: torch.Tensor, tgt: torch.Tensor, temperature: float, gather: bool,
              same_language: bool) -> torch.Tensor:
    src_n, tgt_n = F.normalize(src, dim=-1), F.normalize(tgt, dim=-1)
    all_src, offset = gather_rows(src_n) if gather else (src_n, 0)
    all_tgt, _ = gather_rows(tgt_n) if gather else (tgt_n, 0)
    labels = torch.arange(offset, offset + len(src), device=src.device)
    ways = []
    for rows, other, same in ((src_n, all_tgt, all_src), (tgt_n, all_src, all_tgt)):
        logits = _cosines(rows, other) / temperature
        if same_language:  # the sentence itself is no candidate: -inf on its own column
            own = _cosines(rows, same) / temperature
            own = own.masked_fill(F.one_hot(labels, len(same)).bool(), float("-inf"))
            logits = torch.cat([logits, own], 1)
        ways.append(F.cross_entropy(logits, labels, reduction="none"))
    return (ways[0] + ways[1]) / 2


def _cosines(rows: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """(n, m) cosines of unit vectors, per head averaged over the heads."""
    if rows.dim() == 2:
        return rows @ columns.T
    return torch.einsum("ikd,jkd->ij", rows, columns) / rows.size(1)


def gather_rows(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Every process's rows of `x` in rank order (differentiable: each process's loss reaches the
    rows it used of the others), and where this process's own rows start. Processes may hold
    different numbers of rows (zero too); alone, `x` itself and 0."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return x, 0
    from torch.distributed.nn.functional import all_gather

    size = torch.tensor([len(x)], device=x.device)
    sizes = [torch.zeros_like(size) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, size)
    counts = [int(s) for s in sizes]
    padded = x.new_zeros((max(counts), *x.shape[1:]))
    padded = torch.cat([x, padded[len(x):]]) if len(x) else padded
    parts = all_gather(padded)
    rank = dist.get_rank()
    return torch.cat([p[:c] for p, c in zip(parts, counts)]), sum(counts[:rank])
