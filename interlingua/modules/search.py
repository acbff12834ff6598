"""Batched greedy and beam search over any decoder kind's `step` (the `Decoder` interface)."""
from __future__ import annotations

from typing import Any

import torch

from interlingua.data.vocab import BOS, EOS
from interlingua.modules.base import Decoder


def greedy_search(decoder: Decoder, state: Any, max_len: int) -> list[list[int]]:
    """Most probable token at every step; finished sentences leave the batch."""
    batch = decoder.batch_size(state)
    prev = torch.full((batch,), BOS, dtype=torch.long)
    active = torch.arange(batch)
    outputs: list[list[int]] = [[] for _ in range(batch)]
    for _ in range(max_len):
        logp, state = decoder.step(prev, state)
        tok = logp.argmax(-1)
        done = tok == EOS
        for row, t in zip(active.tolist(), tok.tolist()):
            if t != EOS:
                outputs[row].append(t)
        if done.all():
            break
        if done.any():
            keep = (~done).nonzero().squeeze(1)
            state, tok, active = decoder.reorder_state(state, keep), tok[keep], active[keep]
        prev = tok
    return outputs


def beam_search(decoder: Decoder, state: Any, max_len: int, beam_size: int,
                length_penalty: float = 1.0) -> list[list[int]]:
    """Beam search: the best-scoring hypothesis of each sentence (see `beam_search_nbest`)."""
    return [nbest[0][1] if nbest else [] for nbest in beam_search_nbest(decoder, state, max_len, beam_size, length_penalty)]


def beam_search_nbest(decoder: Decoder, state: Any, max_len: int, beam_size: int,
                      length_penalty: float = 1.0) -> list[list[tuple[float, list[int]]]]:
    """Beam search; every finished hypothesis of each sentence as (score, token ids), best first.

    A hypothesis' score is log p(y_1 .. y_n, </s>) / (n + 1)**length_penalty: its
    log-probability divided by its length counted with the end-of-sentence token
    (0 ranks by log-probability alone; larger values favour longer output). A hypothesis
    still unfinished after `max_len` steps scores log p(y_1 .. y_max_len) / max_len**length_penalty.

    Each step keeps the best `beam_size` unfinished continuations among the top 2*beam
    candidates; an end-of-sentence candidate ranked above them is stored as finished.
    A sentence is done once it has `beam_size` finished hypotheses; done sentences leave
    the batch, so long sentences do not keep short ones computing.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1, got {beam_size}")
    k = beam_size
    batch = decoder.batch_size(state)
    state = decoder.reorder_state(state, torch.arange(batch).repeat_interleave(k))
    scores = torch.full((batch, k), float("-inf"))
    scores[:, 0] = 0.0
    seqs = torch.full((batch * k, 0), BOS, dtype=torch.long)
    prev = torch.full((batch * k,), BOS, dtype=torch.long)
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(batch)]
    active = torch.arange(batch)
    for t in range(max_len):
        logp, state = decoder.step(prev, state)
        vocab = logp.size(-1)
        n = active.numel()
        cand = (scores.unsqueeze(-1) + logp.view(n, k, vocab)).view(n, k * vocab)
        top_s, top_i = cand.topk(2 * k, dim=1)
        beam_i, tok = top_i // vocab, top_i % vocab
        is_eos = tok == EOS
        live_rank = torch.cumsum(~is_eos, dim=1)
        norm = float(t + 1) ** length_penalty
        for r, j in ((is_eos & (live_rank < k) & torch.isfinite(top_s)).nonzero().tolist()):
            hyp = seqs[r * k + beam_i[r, j]].tolist()
            finished[int(active[r])].append((float(top_s[r, j]) / norm, hyp))
        keep = (~is_eos) & (live_rank <= k)
        order = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)[:, :k]
        scores = top_s.gather(1, order)
        origin = (beam_i.gather(1, order) + torch.arange(n).unsqueeze(1) * k).view(-1)
        prev = tok.gather(1, order).view(-1)
        seqs = torch.cat([seqs[origin], prev.unsqueeze(1)], dim=1)
        state = decoder.reorder_state(state, origin)
        done = torch.tensor([len(finished[int(a)]) >= k for a in active])
        if t == max_len - 1:
            done[:] = True
            for r in range(n):
                if len(finished[int(active[r])]) < k:
                    for j in range(k):
                        if torch.isfinite(scores[r, j]):
                            finished[int(active[r])].append((float(scores[r, j]) / float(t + 1) ** length_penalty,
                                                             seqs[r * k + j].tolist()))
        if done.all():
            break
        if done.any():
            keep_rows = (~done).nonzero().squeeze(1)
            flat = (keep_rows.unsqueeze(1) * k + torch.arange(k)).view(-1)
            active, scores = active[keep_rows], scores[keep_rows]
            seqs, prev, state = seqs[flat], prev[flat], decoder.reorder_state(state, flat)
    return [sorted(f, key=lambda x: -x[0]) for f in finished]
