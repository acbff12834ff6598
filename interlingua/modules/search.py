"""Batched greedy and beam search over any decoder's `step` (`StepDecoder`: a `Decoder` kind, or a wrapper
around one), the state reordered through the state itself (`DecoderStateLike`); and translation's two halves
that translation and dev validation share: `encoded_batches` (prefix, length-sorted batches, encoder + bridge)
and the decode half (`decode_merging_tails`, which decodes the tails of batches together; `decode_batch`, one
batch), joined in `translate_ids`. Search runs on the decoder's device."""
from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from interlingua.arguments import BEAM_STOPS
from interlingua.data.inputs import length_sorted_batches
from interlingua.data.shortlist import DirectionTable
from interlingua.data.vocab import BOS, EOS, Vocab, decoder_start, source_prefix
from interlingua.modules.base import BridgeOutput, DecoderStateLike, decoder_device
from interlingua.modules.candidates import argmax_rows, best_candidates
from interlingua.modules.ngram_blocking import NgramBlockingDecoder, with_ngram_blocking
from interlingua.modules.shortlist_decoding import START_POSITION, ShortlistDecoder

if TYPE_CHECKING:
    from interlingua.modules.model import TranslationNetwork


class StepDecoder(Protocol):
    """What the search needs of a decoder: one step. The state it returns is a `DecoderStateLike`, which the
    search selects, reorders and expands to beams itself. Greedy search takes the step's unnormalised scores
    where the decoder gives them (`Decoder.step_scores`), and `step` otherwise."""

    def step(self, prev: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """prev (rows,) ids -> log-probabilities (rows, V) fp32, and the state after the step."""
        ...


def _best_token_scores(decoder: StepDecoder) -> Callable[[torch.Tensor, Any], tuple[torch.Tensor, Any]]:
    """The step greedy search ranks tokens with: `step_scores` where the decoder has it (the same best token
    without the log_softmax), else `step`."""
    scores = getattr(decoder, "step_scores", None)
    return scores if callable(scores) else decoder.step


def _limits(max_len: int | Sequence[int] | torch.Tensor, batch: int, device: torch.device) -> torch.Tensor:
    """Each sentence's output limit (batch,): one for all, or one per sentence, so that a sentence's
    output never depends on what it is batched with."""
    limits = torch.as_tensor(max_len, dtype=torch.long, device=device)
    if limits.dim() == 0:
        limits = limits.expand(batch)
    if limits.shape != (batch,):
        raise ValueError(f"max_len needs one limit or one per sentence ({batch}), got shape {tuple(limits.shape)}")
    return limits


def greedy_search(decoder: StepDecoder, state: DecoderStateLike, max_len: int | Sequence[int] | torch.Tensor,
                  start: int = BOS, sample: torch.Generator | None = None) -> list[list[int]]:
    """Most probable token at every step (the first input is `start`); finished sentences leave the
    batch. `max_len`: the most output tokens, for all sentences or per sentence. `sample`: draw each
    token from the model's distribution with this generator instead (sampled back-translation).
    (`greedy_search_merging_tails` over this one batch.)"""
    group = _one_batch(decoder, state, max_len)
    if group is None:
        return [[] for _ in range(state.batch_size)]
    found = dict(greedy_search_merging_tails(decoder, [group], state.batch_size, start, sample))
    return [found[i] for i in range(state.batch_size)]


def _one_batch(decoder: StepDecoder, state: DecoderStateLike,
               max_len: int | Sequence[int] | torch.Tensor) -> Group | None:
    """The batch as the one group of a merging search (`greedy_search`, `beam_search_nbest`): its sentences keyed
    by their rows, with their output limits; None when no sentence has a step to take (an empty batch, or every
    limit 0), which gives empty outputs without stepping."""
    batch = state.batch_size
    limits = _limits(max_len, batch, decoder_device(decoder))
    if not batch or int(limits.max()) <= 0:
        return None
    return list(range(batch)), state, limits


def joinable(state: Any) -> bool:
    """Whether rows of more sentences can join `state` while it is decoded (`_merging_tails`): its class
    has `join` (the Transformer's and the LSTM's states do; a decoder kind of one's own may add it)."""
    return callable(getattr(state, "join", None))


TAIL_SHARE = 0.25
"""A batch is set aside as a tail once its unfinished sentences are at most this share of the batch size."""
JOIN_SHARE = 0.75
"""Set-aside tails are joined into one batch once they hold this share of the batch size (or no batch is left).
Both chosen on test2016's en->de greedy pass of a d128 Transformer among 0.06-0.5 and 0.5-1.0 (1.3-1.8x with
these, the spread from run to run about as large as between the best settings: docs/results/speed.md)."""


class _Run(Protocol):
    """Sentences decoded together, which `_merging_tails` sets aside and joins."""
    keys: list[int]

    def join(self: _RunT, other: _RunT) -> _RunT:
        ...


_RunT = TypeVar("_RunT", bound=_Run)
Group = tuple[list[int], DecoderStateLike, torch.Tensor]
"""A batch to search: its sentences' keys, their start state and their output limits."""


def _merging_tails(groups: Iterable[Group], capacity: int, begin: Callable[[Group], _RunT],
                   advance: Callable[[_RunT], tuple[list[tuple[int, Any]], _RunT | None]]) -> Iterator[tuple[int, Any]]:
    """The search over a stream of batches in which the tails of batches are decoded together: `begin` makes a run
    of a batch, `advance` decodes it one step (what finished, as (key, result), and the run of the rest, or None);
    once a run is down to `TAIL_SHARE` of `capacity` unfinished sentences it is set aside, and set-aside runs are
    joined into one (`_Run.join`, each row at its own position) once they make `JOIN_SHARE` of `capacity`, or when
    no batch is left. Yields (key, result) as each sentence finishes.

    Why: in a batch of sentences sorted by length, a few run on long after the rest have finished (in a greedy
    pass of a d128 Transformer over test2016, 864 of 1,250 steps had fewer than 8 of 64 rows), and a step of a
    handful of rows costs nearly what a step of many does. Tails are set aside at about the same step of
    their batches, so that joined rows are at about the same position and attend over little padding (joining
    new sentences into a batch's free rows, tried first, made every row attend over the oldest row's positions
    and cost as much as it saved). Up to its tail a batch is decoded exactly as alone; a row's tokens after
    joining are what its sentence alone gives, up to float rounding in products over a batch of another
    make-up."""
    tail = max(1, int(capacity * TAIL_SHARE))
    source = iter(groups)
    pending = next(source, None)
    parked: list[_RunT] = []
    while pending is not None or parked:
        if parked and (pending is None or sum(len(p.keys) for p in parked) >= capacity * JOIN_SHARE):
            run: _RunT | None = functools.reduce(lambda a, b: a.join(b), parked)
            parked = []
        else:
            assert pending is not None
            run, pending = begin(pending), next(source, None)
        more, stepped = pending is not None or bool(parked), False
        while run is not None and run.keys:
            if more and stepped and len(run.keys) <= tail:  # stepped: every pass of the loop decodes something
                parked.append(run)
                break
            stepped = True
            finished, run = advance(run)
            yield from finished


@dataclass
class _GreedyRun:
    """Sentences greedy search decodes together: their keys, output so far, state, remaining output limits and
    last tokens."""
    keys: list[int]
    outputs: list[list[int]]
    state: Any
    limits: torch.Tensor
    prev: torch.Tensor

    def join(self, other: _GreedyRun) -> _GreedyRun:
        return _GreedyRun(self.keys + other.keys, self.outputs + other.outputs, self.state.join(other.state),
                          torch.cat([self.limits, other.limits]), torch.cat([self.prev, other.prev]))


def greedy_search_merging_tails(decoder: StepDecoder, groups: Iterable[Group], capacity: int, start: int = BOS,
                                sample: torch.Generator | None = None) -> Iterator[tuple[int, list[int]]]:
    """`greedy_search` over a stream of batches (`groups`, at most `capacity` sentences each), the tails of
    batches decoded together (`_merging_tails`): yields (key, output ids) as each sentence finishes. `sample`: as
    in `greedy_search`."""
    best_token_scores = _best_token_scores(decoder)
    device = decoder_device(decoder)

    def choose(prev: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """The next token of each row and the state after the step."""
        if sample is None:
            scores, state = best_token_scores(prev, state)
            return argmax_rows(scores), state
        logp, state = decoder.step(prev, state)
        return torch.multinomial(logp.float().exp(), 1, generator=sample).squeeze(1), state

    def begin(group: Group) -> _GreedyRun:
        keys, state, limits = group
        return _GreedyRun(keys, [[] for _ in keys], state, limits.to(device),
                          torch.full((len(keys),), start, dtype=torch.long, device=device))

    def advance(run: _GreedyRun) -> tuple[list[tuple[int, Any]], _GreedyRun | None]:
        tok, state = choose(run.prev, run.state)
        limits = run.limits - 1
        done = (tok == EOS) | (limits <= 0)
        for out, token in zip(run.outputs, tok.tolist()):
            out.append(token)
        if not done.any():
            return [], _GreedyRun(run.keys, run.outputs, state, limits, tok)
        finished = [(run.keys[r], run.outputs[r][:-1] if run.outputs[r][-1] == EOS else run.outputs[r])
                    for r in done.nonzero().squeeze(1).tolist()]
        keep = (~done).nonzero().squeeze(1)
        kept = keep.tolist()
        if not kept:
            return finished, None
        return finished, _GreedyRun([run.keys[r] for r in kept], [run.outputs[r] for r in kept], state.select(keep),
                                    limits[keep], tok[keep])

    return _merging_tails(groups, capacity, begin, advance)


def beam_search(decoder: StepDecoder, state: DecoderStateLike, max_len: int | Sequence[int] | torch.Tensor,
                beam_size: int, length_penalty: float = 1.0, start: int = BOS, stop: str = "all") -> list[list[int]]:
    """Beam search: the best-scoring hypothesis of each sentence (see `beam_search_nbest`)."""
    return [nbest[0][1] if nbest else []
            for nbest in beam_search_nbest(decoder, state, max_len, beam_size, length_penalty, start, stop)]


def beam_search_nbest(decoder: StepDecoder, state: DecoderStateLike, max_len: int | Sequence[int] | torch.Tensor,
                      beam_size: int, length_penalty: float = 1.0, start: int = BOS,
                      stop: str = "all") -> list[list[tuple[float, list[int]]]]:
    """Beam search; every finished hypothesis of each sentence as (score, token ids), best first.

    A hypothesis' score is log p(y_1 .. y_n, </s>) / (n + 1)**length_penalty: its
    log-probability divided by its length counted with the end-of-sentence token
    (0 ranks by log-probability alone; larger values favour longer output). A hypothesis
    still unfinished after `max_len` steps scores log p(y_1 .. y_max_len) / max_len**length_penalty.
    `max_len` is one limit for all sentences or one per sentence.

    Each step keeps the best `beam_size` unfinished continuations among the top 2*beam
    candidates; an end-of-sentence candidate ranked above them is stored as finished.
    `stop` says when a sentence is done: `all`, once it has `beam_size` finished hypotheses;
    `top`, also as soon as the best candidate of a step ends the sentence (OpenNMT-py's and
    CTranslate2's rule: no live hypothesis can then beat it on log-probability, though a longer
    one may still on the length-normalised score). Done sentences leave the batch, so long
    sentences do not keep short ones computing. The first step runs once per sentence (every
    beam starts the same), then the state is expanded to the beams (`DecoderStateLike.expand_beams`). The
    decoder's first input is `start` (BOS, or the target-language tag of a model that signals it there).
    """
    group = _one_batch(decoder, state, max_len)
    _check_beam(beam_size, stop)
    if group is None:
        return [[] for _ in range(state.batch_size)]
    found = dict(beam_search_merging_tails(decoder, [group], state.batch_size, beam_size, length_penalty, start, stop))
    return [found.get(i, []) for i in range(state.batch_size)]


def _check_beam(beam_size: int, stop: str) -> None:
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1, got {beam_size}")
    if stop not in BEAM_STOPS:
        raise ValueError(f"stop must be one of {BEAM_STOPS}, got {stop!r}")


@dataclass
class _BeamRun:
    """Sentences beam search decodes together: their keys, state (`width` rows a sentence), the scores of their
    live hypotheses (sentences, width), the hypotheses' tokens (rows, columns: a sentence's own are its last
    `steps` columns, since sentences joined at different steps), the tokens chosen so far per sentence, the last
    tokens, output limits, and the finished hypotheses."""
    keys: list[int]
    state: Any
    width: int
    scores: torch.Tensor
    seqs: torch.Tensor
    steps: torch.Tensor
    prev: torch.Tensor
    limits: torch.Tensor
    finished: list[list[tuple[float, list[int]]]]

    def join(self, other: _BeamRun) -> _BeamRun:
        if self.width != other.width:
            raise ValueError("beam runs join once both are expanded to their beams")
        columns = max(self.seqs.size(1), other.seqs.size(1))
        seqs = [F.pad(run.seqs, (columns - run.seqs.size(1), 0)) for run in (self, other)]
        return _BeamRun(self.keys + other.keys, self.state.join(other.state), self.width,
                        torch.cat([self.scores, other.scores]), torch.cat(seqs), torch.cat([self.steps, other.steps]),
                        torch.cat([self.prev, other.prev]), torch.cat([self.limits, other.limits]),
                        self.finished + other.finished)

    def select(self, sentences: torch.Tensor, width: int) -> _BeamRun:
        """The sentences `sentences` (indices into this run's) with their `width` rows each."""
        rows = (sentences.unsqueeze(1) * width + torch.arange(width, device=sentences.device)).view(-1)
        kept = sentences.tolist()
        return _BeamRun([self.keys[r] for r in kept], self.state.select(rows), width, self.scores[sentences],
                        self.seqs[rows], self.steps[sentences], self.prev[rows], self.limits[sentences],
                        [self.finished[r] for r in kept])


def beam_search_merging_tails(decoder: StepDecoder, groups: Iterable[Group], capacity: int, beam_size: int,
                              length_penalty: float = 1.0, start: int = BOS,
                              stop: str = "all") -> Iterator[tuple[int, list[tuple[float, list[int]]]]]:
    """`beam_search_nbest` over a stream of batches (`groups`, at most `capacity` sentences each), the tails of
    batches decoded together (`_merging_tails`): yields (key, its finished hypotheses, best first) as each
    sentence finishes."""
    _check_beam(beam_size, stop)
    k, device = beam_size, decoder_device(decoder)

    def begin(group: Group) -> _BeamRun:
        keys, state, limits = group
        n = len(keys)
        return _BeamRun(keys, state, 1, torch.zeros((n, 1), device=device),
                        torch.full((n, 0), start, dtype=torch.long, device=device),
                        torch.zeros(n, dtype=torch.long, device=device),
                        torch.full((n,), start, dtype=torch.long, device=device), limits.to(device),
                        [[] for _ in keys])

    def advance(run: _BeamRun) -> tuple[list[tuple[int, Any]], _BeamRun | None]:
        logp, state = decoder.step(run.prev, run.state)
        vocab, n, width = logp.size(-1), len(run.keys), run.width
        top_s, top_i = best_candidates(run.scores, logp, min(2 * k, width * vocab))
        beam_i, tok = top_i // vocab, top_i % vocab
        is_eos = tok == EOS
        live_rank = torch.cumsum(~is_eos, dim=1)
        ends = is_eos & (live_rank < k) & torch.isfinite(top_s)
        steps = run.steps.tolist()  # before this step
        if ends.any():  # the (few) hypotheses that end here are stored; no loop over all sentences
            columns = run.seqs.size(1)
            for r, j in ends.nonzero().tolist():
                hyp = run.seqs[r * width + beam_i[r, j]].tolist()[columns - steps[r]:]
                run.finished[r].append((float(top_s[r, j]) / float(steps[r] + 1) ** length_penalty, hyp))
        keep = (~is_eos) & (live_rank <= k)
        order = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)[:, :k]
        scores = top_s.gather(1, order)
        origin = (beam_i.gather(1, order) + torch.arange(n, device=device).unsqueeze(1) * width).view(-1)
        prev = tok.gather(1, order).view(-1)
        seqs = torch.cat([run.seqs[origin], prev.unsqueeze(1)], dim=1)
        # after the first step rows move only inside their sentence's beams
        state = state.expand_beams(origin) if width == 1 else state.reorder_beams(origin)
        after = run.steps + 1
        done = torch.tensor([len(f) >= k for f in run.finished], device=device)
        if stop == "top":
            done |= is_eos[:, 0] & torch.isfinite(top_s[:, 0])
        at_limit = run.limits <= after
        if at_limit.any():
            for r in at_limit.nonzero().squeeze(1).tolist():
                if len(run.finished[r]) < k:
                    for j in range(k):
                        if torch.isfinite(scores[r, j]):
                            run.finished[r].append((float(scores[r, j]) / float(steps[r] + 1) ** length_penalty,
                                                    seqs[r * k + j].tolist()[-(steps[r] + 1):]))
            done |= at_limit
        finished = [(run.keys[r], sorted(run.finished[r], key=lambda x: -x[0]))
                    for r in done.nonzero().squeeze(1).tolist()]
        if len(finished) == n:
            return finished, None
        rest = _BeamRun(run.keys, state, k, scores, seqs, after, prev, run.limits, run.finished)
        return finished, (rest if not finished else rest.select((~done).nonzero().squeeze(1), k))

    return _merging_tails(groups, capacity, begin, advance)


def encoded_batches(network: TranslationNetwork, vocabs: dict[str, Vocab], seqs: Sequence[np.ndarray], src_lang: str,
                    tgt_lang: str, batch_size: int) -> Iterator[tuple[list[int], torch.Tensor, BridgeOutput]]:
    """The encode half of translation: (original indices, source lengths with the prefix, encoder + bridge
    output on the model's device) per length-sorted batch of the non-empty sources. `tgt_lang` matters only
    to a model that puts the target's tag before the source (`source_prefix`)."""
    prefix = source_prefix(vocabs[src_lang], tgt_lang, network.cfg.shared, network.cfg.tag_position)
    device = network.device
    for idx, ids, lengths in length_sorted_batches(list(seqs), batch_size, prefix):
        yield idx, lengths, network.run_encoder(ids.to(device), lengths.to(device), src_lang)


def output_limits(lengths: torch.Tensor, max_len: int | None, max_len_cap: int, readable: int | None) -> torch.Tensor:
    """Each sentence's most output subwords: `max_len`, or by default twice its own source length (`lengths`,
    prefix included) + 10, at most `max_len_cap`; never past a decoder's learned position table
    (`readable`: the start token and the limit's steps fit in it). From the sentence alone, so that a
    translation does not depend on the batch it is in."""
    limit = torch.full_like(lengths, max_len) if max_len else (lengths * 2 + 10).clamp(max=max_len_cap)
    return limit if readable is None else limit.clamp(max=readable)


def decode_batch(network: TranslationNetwork, vocabs: dict[str, Vocab], bridged: BridgeOutput, lengths: torch.Tensor,
                 tgt_lang: str, *, beam: int = 1, length_penalty: float = 1.0, max_len: int | None = None,
                 max_len_cap: int = 100, beam_stop: str = "all",
                 candidates: Sequence[np.ndarray] | None = None, no_repeat_ngram: int = 0) -> list[str]:
    """The decode half of translation: one batch's memory (`bridged`, from `encoded_batches` or put back
    together from a representation) searched into `tgt_lang`, greedily (`beam` 1) or with beam search,
    and detokenised; `lengths` are the sources' (prefix included), which set the output limits.
    `candidates`: per sentence, the target ids of its shortlist (`data.shortlist`); None: the whole
    vocabulary. `no_repeat_ngram` n > 0: no n-gram twice in an output (`modules.ngram_blocking`)."""
    vocab = vocabs[tgt_lang]
    start = decoder_start(vocab, tgt_lang, network.cfg.shared, network.cfg.tag_position)
    limit = output_limits(lengths, max_len, max_len_cap, network.decoder_for(tgt_lang).max_length)
    decoder, state = network.start_decoding(bridged, tgt_lang)
    searched: StepDecoder = decoder
    shortlist = None
    if candidates is not None:
        shortlist = ShortlistDecoder(decoder, candidates, start)
        searched, state, start = shortlist, shortlist.wrap(state), START_POSITION
    searched, state = with_ngram_blocking(searched, state, no_repeat_ngram)
    if beam == 1:
        hyps = greedy_search(searched, state, limit, start)
    else:
        hyps = beam_search(searched, state, limit, beam, length_penalty, start, beam_stop)
    if shortlist is not None:
        hyps = shortlist.to_ids(hyps)
    return [vocab.decode(h) for h in hyps]


def decode_merging_tails(network: TranslationNetwork, vocabs: dict[str, Vocab],
                         batches: Iterable[tuple[list[int], torch.Tensor, BridgeOutput]], tgt_lang: str, *,
                         capacity: int, beam: int = 1, length_penalty: float = 1.0, max_len: int | None = None,
                         max_len_cap: int = 100, beam_stop: str = "all",
                         no_repeat_ngram: int = 0) -> Iterator[tuple[int, str]]:
    """Translations of `batches` ((keys, source lengths, memory) as `encoded_batches` gives them), greedy (`beam`
    1) or with beam search, the tails of batches decoded together (`greedy_search_merging_tails`,
    `beam_search_merging_tails`), yielded as (key, text) as each sentence finishes. A decoder whose state cannot
    take rows in (`joinable`) decodes batch by batch (`decode_batch`)."""
    vocab = vocabs[tgt_lang]
    start = decoder_start(vocab, tgt_lang, network.cfg.shared, network.cfg.tag_position)
    readable = network.decoder_for(tgt_lang).max_length
    started = ((idx, lengths, bridged, *network.start_decoding(bridged, tgt_lang)) for idx, lengths, bridged in batches)
    first = next(started, None)
    if first is None:
        return
    if not joinable(first[4]):
        for idx, lengths, bridged, _, _ in itertools.chain([first], started):
            yield from zip(idx, decode_batch(network, vocabs, bridged, lengths, tgt_lang, beam=beam,
                                             length_penalty=length_penalty, max_len=max_len, max_len_cap=max_len_cap,
                                             beam_stop=beam_stop, no_repeat_ngram=no_repeat_ngram))
        return
    blocking = NgramBlockingDecoder(first[3], no_repeat_ngram) if no_repeat_ngram else None
    decoder: StepDecoder = first[3] if blocking is None else blocking
    groups = ((idx, state if blocking is None else blocking.wrap(state),
               output_limits(lengths, max_len, max_len_cap, readable))
              for idx, lengths, _, _, state in itertools.chain([first], started))
    if beam == 1:
        for key, ids in greedy_search_merging_tails(decoder, groups, capacity, start):
            yield key, vocab.decode(ids)
    else:
        for key, nbest in beam_search_merging_tails(decoder, groups, capacity, beam, length_penalty, start,
                                                    beam_stop):
            yield key, vocab.decode(nbest[0][1] if nbest else [])


def batches_total(lengths: Sequence[int], batch_size: int) -> int:
    """How many batches the non-empty sequences make (a progress bar's total)."""
    return (sum(1 for n in lengths if n) + batch_size - 1) // batch_size


@torch.inference_mode()
def translate_ids(network: TranslationNetwork, vocabs: dict[str, Vocab], seqs: Sequence[np.ndarray], src_lang: str,
                  tgt_lang: str, *, batch_size: int, beam: int = 1, length_penalty: float = 1.0,
                  max_len: int | None = None, max_len_cap: int = 100, progress: bool = False,
                  beam_stop: str = "all", shortlist: DirectionTable | None = None,
                  no_repeat_ngram: int = 0) -> list[str]:
    """Translations of the tokenised sources `seqs` (from `data.inputs.tokenize_inputs`), in their
    order; an empty source gives "". Sources get the model's prefix (`source_prefix`), go through
    in length-sorted batches on the model's device (`encoded_batches`), each encoded as the search reaches it,
    and are searched with the tails of batches decoded together (`decode_merging_tails`: greedy for `beam` 1,
    else beam search; output limits from `output_limits`), so a batch's memory lives until its tail is done.
    With a `shortlist` each sentence's output layer is restricted to its candidates
    (`modules.shortlist_decoding`), batch by batch (`decode_batch`). `Model.translate` runs the same two
    halves with the whole representation kept in between (`Model.represent`, `Model.generate`)."""
    network.eval()
    out = [""] * len(seqs)
    batches = encoded_batches(network, vocabs, seqs, src_lang, tgt_lang, batch_size)
    if shortlist is None:
        sentences = sum(1 for s in seqs if len(s))
        for key, text in tqdm(decode_merging_tails(network, vocabs, batches, tgt_lang, capacity=batch_size, beam=beam,
                                                   length_penalty=length_penalty, max_len=max_len,
                                                   max_len_cap=max_len_cap, beam_stop=beam_stop,
                                                   no_repeat_ngram=no_repeat_ngram),
                              total=sentences, desc=f"{src_lang}->{tgt_lang}", unit="sent", disable=not progress,
                              leave=False):
            out[key] = text
        return out
    for idx, lengths, bridged in tqdm(batches, total=batches_total([len(s) for s in seqs], batch_size),
                                      desc=f"{src_lang}->{tgt_lang}", unit="batch", disable=not progress, leave=False):
        candidates = None if shortlist is None else [shortlist.candidates(seqs[i]) for i in idx]
        texts = decode_batch(network, vocabs, bridged, lengths, tgt_lang, beam=beam, length_penalty=length_penalty,
                             max_len=max_len, max_len_cap=max_len_cap, beam_stop=beam_stop, candidates=candidates,
                             no_repeat_ngram=no_repeat_ngram)
        for i, text in zip(idx, texts):
            out[i] = text
    return out
