"""Synthetic sentence pairs made online, by the model being trained, for directions without parallel
data (`train.synthetic`): pivot-based pairs and random online back-translation.

Each step, `SyntheticPairs.plan` decides from (seed, step) alone which of the step's batches get a
synthetic batch and in which language, so every process and a resumed run decide alike. Then
`SyntheticPairs.make` translates this process's part of each chosen batch with the model as it is
(eval mode, no gradient, the step's autocast; one search per language pair for the whole step), drops
empty and unfinished made sentences (and with `language_filter` those in another language), and
returns one extra pass per part (a made source sentence after the BOS id with `tag`): a made target
token weighs what a real one of the step weighs (`weighting: token`), or each made batch is a mean of
its own weighing as much as the step's real batch (`weighting: batch`). With `distill`, a made target
carries the making direction's distribution at each of its positions (word-level distillation of the
pivot path). Greedy and beam making draw nothing from the RNG; sampled making uses a generator seeded
from (seed, step, rank), so exact resume holds either way.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np
import torch

from interlingua.config import SyntheticConfig
from interlingua.data.batching import make_batch, pad_sources, shard
from interlingua.data.directions import Direction, synthetic_directions
from interlingua.data.language_id import identify, supported
from interlingua.data.vocab import BOS, UNK
from interlingua.modules.ngram_blocking import with_ngram_blocking
from interlingua.modules.search import beam_search, greedy_search, output_limits
from interlingua.training.metrics import SyntheticStats
from interlingua.training.run import Run
from interlingua.training.step import MicroBatch, StepPart

PIVOT, BACKTRANSLATION = "pivot", "backtranslation"


@dataclass(frozen=True)
class SyntheticJob:
    """One translation of a step: one side of step part `part`'s pairs is translated into `made_lang` and
    paired with a side kept as it is (the other side in `pivot` mode, the same one in back-translation);
    the pairs train kept -> made and / or made -> kept (`made_is_target`: one batch per entry)."""

    part: int
    mode: str
    made_from_source: bool
    """Whether the translated side is the part's source side (else its target side)."""
    kept_is_source: bool
    """Whether the side kept as it is is the part's source side (else its target side)."""
    made_lang: str
    made_is_target: tuple[bool, ...]

    def direction(self, parts: list[StepPart], made_is_target: bool) -> Direction:
        s, t = parts[self.part][0]
        kept = s if self.kept_is_source else t
        return (kept, self.made_lang) if made_is_target else (self.made_lang, kept)


@dataclass(frozen=True)
class MadePairs:
    """What one job made on this process: the kept side, the made sentences, and the side they were made
    from (the pivot side in `pivot` mode), with `filler` a one-pair stand-in where nothing was kept."""

    job: SyntheticJob
    given: list[np.ndarray]
    made: list[np.ndarray]
    filler: bool
    translated: list[np.ndarray]
    from_lang: str


class SyntheticPairs:
    """The run's synthetic-pair maker: which directions get pairs, and who can make them."""

    def __init__(self, run: Run):
        self.run = run
        self.cfg: SyntheticConfig = run.cfg.train.synthetic
        self.directions = set(synthetic_directions(self.cfg.directions, run.zero_shot))
        trained = set(run.directions)
        self.trained = trained
        self.sources = sorted(run.network.encoder_langs)
        self.targets = set(run.network.decoder_langs)
        languages = sorted(set(self.sources) | self.targets)
        self.identify = supported(languages)
        self.languages = languages

    @property
    def active(self) -> bool:
        return bool(self.cfg.modes) and bool(self.directions)

    def plan(self, parts: list[StepPart], step: int, elapsed: float = 0.0, time_share: float = 0.0
             ) -> list[SyntheticJob]:
        """The step's synthetic batches, from (seed, step) alone (the same on every process and after a
        resume); none before `start_step`, nor before `start_minutes` of training (`elapsed` seconds)."""
        cfg = self.cfg
        if not self.active or step < cfg.start_step:
            return []
        if cfg.start_minutes is not None and elapsed < cfg.start_minutes * 60:
            return []
        if cfg.max_time_share is not None and time_share > cfg.max_time_share:
            return []
        rng = np.random.default_rng([self.run.cfg.train.seed, step, 0x5E7])
        jobs = []
        for i, ((s, t), _) in enumerate(parts):
            for mode in cfg.modes:
                draw, pick = rng.random(), rng.random()  # always two draws: the stream does not depend on choices
                if s == t or draw >= cfg.rate:
                    continue
                options = self._options(mode, i, s, t)
                if options:
                    jobs.append(options[int(pick * len(options))])
        return jobs

    def _options(self, mode: str, part: int, s: str, t: str) -> list[SyntheticJob]:
        """Every synthetic batch that part `part` (direction s -> t) could be given in `mode`."""
        out: list[SyntheticJob] = []
        if mode == PIVOT:
            pivot = self.cfg.pivot
            if pivot not in (s, t):
                return []
            x, from_source = (t, True) if s == pivot else (s, False)
            for y in sorted(self.targets):  # made by the supervised pivot -> y
                if y in (x, pivot) or (pivot, y) not in self.trained:
                    continue
                uses = ((True,) if self.cfg.forward and (x, y) in self.directions and x in self.sources else ()) + (
                    (False,) if self.cfg.reverse and (y, x) in self.directions and y in self.sources
                    and x in self.targets else ())
                if uses:
                    out.append(SyntheticJob(part, mode, from_source, not from_source, y, uses))
        else:  # back-translation: the target side translated into a third source language
            for other in self.sources:
                if other in (s, t) or (other, t) not in self.directions or other not in self.targets:
                    continue
                out.append(SyntheticJob(part, mode, False, False, other, (False,)))
        return out

    def make(self, parts: list[StepPart], jobs: list[SyntheticJob],
             step: int) -> tuple[list[MicroBatch], SyntheticStats]:
        """This process's passes of the step's synthetic batches, and what they were (summed over the processes)."""
        run, tc = self.run, self.run.cfg.train
        clock = time.process_time if tc.clock == "cpu" else time.perf_counter
        t0 = clock()
        world, n_parts = run.dist.world_size, run.dist.world_size * tc.accumulate
        generator = None
        if self.cfg.decoding == "sample":
            generator = torch.Generator(device=run.runtime.device)
            generator.manual_seed(int(np.random.default_rng([tc.seed, step, run.dist.rank, 0x5A]).integers(2**62)))
        # what each job translates on this process (per accumulation part), then one translation per language
        # pair for the whole step: a few large batches instead of one small one per job (on a GPU each
        # search step is a kernel launch per layer, whatever the batch)
        wanted: list[tuple[SyntheticJob, list[np.ndarray], list[np.ndarray], str]] = []
        for job in jobs:
            (s, t), idx = parts[job.part]
            batches = run.batches[(s, t)]
            for m in range(tc.accumulate):
                mine = shard(idx, n_parts, m * world + run.dist.rank)
                source_side = [batches.src[i] for i in mine]
                target_side = [batches.tgt[i] for i in mine]
                wanted.append((job, source_side if job.made_from_source else target_side,
                               source_side if job.kept_is_source else target_side, s if job.made_from_source else t))
        with self._evaluating():
            translated = self._translate_grouped([(seqs, from_lang, job.made_lang)
                                                  for job, seqs, _, from_lang in wanted], generator)
        # an empty sentence, or one still unfinished at its length limit (greedy search caught in a loop, "a man
        # in a shirt shirt shirt ..."), would teach the model to write it
        keeps = [[i for i, h in enumerate(sentences) if 0 < len(h) < limits[i]] for sentences, limits in translated]
        unfinished = sum(len(h) >= n for sentences, limits in translated for h, n in zip(sentences, limits))
        checked = off = 0
        if self.identify:
            texts, owners = [], []
            for w, ((job, *_), (sentences, _), keep) in enumerate(zip(wanted, translated, keeps)):
                vocab = run.data.vocabs[job.made_lang]
                texts += [vocab.decode(sentences[i]) for i in keep]
                owners += [(w, i) for i in keep]
            wrong = {owner for owner, lang in zip(owners, identify(texts, self.languages) if texts else [])
                     if lang != wanted[owner[0]][0].made_lang}
            checked, off = len(owners), len(wrong)
            if self.cfg.language_filter:
                keeps = [[i for i in keep if (w, i) not in wrong] for w, keep in enumerate(keeps)]
        made: list[MadePairs] = []
        for (job, translated_side, given, from_lang), (sentences, _), keep in zip(wanted, translated, keeps):
            kept_given = [given[i] for i in keep]
            kept_made = [np.asarray(sentences[i], dtype=np.int64) for i in keep]
            kept_from = [translated_side[i] for i in keep]
            if not keep:  # a stand-in (weight 0), so every process makes as many passes
                kept_given = (given or [np.asarray([UNK], dtype=np.int64)])[:1]
                kept_made = [np.asarray([UNK], dtype=np.int64)]  # one token: an encoder needs one
                kept_from = kept_made
            made.append(MadePairs(job, kept_given, kept_made, not keep, kept_from, from_lang))
        micro, keys, weight = self._passes(parts, made)
        seconds = clock() - t0
        pairs: dict[str, int] = {}
        for (job, use), pairs_of in zip(keys, [m for m in made for _ in m.job.made_is_target]):
            name = "{}->{}".format(*job.direction(parts, use))
            pairs[name] = pairs.get(name, 0) + (0 if pairs_of.filler else len(pairs_of.given))
        names = sorted(pairs)
        summed = run.dist.sum([float(pairs[n]) for n in names] + [float(checked), float(off), float(unfinished)])
        stats = SyntheticStats({n: int(v) for n, v in zip(names, summed)}, int(summed[-3]), int(summed[-2]),
                               unfinished=int(summed[-1]), seconds=seconds, weight=weight)
        return micro, stats

    def _passes(self, parts: list[StepPart], made: list[MadePairs]
                ) -> tuple[list[MicroBatch], list[tuple[SyntheticJob, bool]], float]:
        """The made pairs as batches (one per job, part and use), the (job, use) of each, and their summed weight
        in the step's loss (the real pairs' being 1). `weighting: token`: a batch weighs its target tokens over
        the step's real target tokens (all processes); `batch`: each job and use, a mean over its own target
        tokens on every process, weighs 1. With `distill`, a batch whose target was made carries the
        distributions of the direction that made it, teacher-forced on the made sentence."""
        run = self.run
        batches, tokens, keys = [], [], []
        for m in made:
            job, given, sentences, filler = m.job, m.given, m.made, m.filler
            for use in job.made_is_target:
                src_lang, tgt_lang = job.direction(parts, use)
                src, tgt = (given, sentences) if use else (self._tagged(sentences, filler), given)
                agree = run.cfg.train.agreement.weight > 0 and self.cfg.agreement
                reverse = run.prefix(tgt_lang, src_lang) if agree else None
                batch = make_batch(src, tgt, src_lang, tgt_lang, run.prefix(src_lang, tgt_lang), run.start(tgt_lang),
                                   reverse)
                if use and self.cfg.distill:
                    batch = replace(batch, soft_targets=self._teacher(m))
                batches.append((batch, filler))
                tokens.append(0.0 if filler else float(sum(len(t) + 1 for t in tgt)))
                keys.append((job, use))
        order = list(dict.fromkeys(keys))  # the same on every process: the jobs are
        mine = {k: sum(n for key, n in zip(keys, tokens) if key == k) for k in order}
        whole = dict(zip(order, run.dist.sum([mine[k] for k in order])))
        world = run.dist.world_size
        # `token`: the step's real target tokens (the same parts on every process); `batch`: each key's own
        denominator = (dict.fromkeys(order, float(sum(run.batches[d].target_tokens(idx) for d, idx in parts)))
                       if self.cfg.weighting == "token" else whole)
        micro = []
        for (batch, filler), n, key in zip(batches, tokens, keys):
            batch = replace(batch, filler=True) if filler else batch
            micro.append(MicroBatch(batch, world * n / denominator[key] if denominator[key] else 0.0, synthetic=True,
                                    agreement=self.cfg.agreement))
        weight = sum(whole[k] / denominator[k] for k in order if denominator[k])
        return micro, keys, weight

    def _tagged(self, sources: list[np.ndarray], filler: bool) -> list[np.ndarray]:
        """Made source sentences, each after the BOS id with `tag` (no real source holds it)."""
        if not self.cfg.tag or filler:
            return sources
        return [np.concatenate([np.asarray([BOS], dtype=s.dtype), s]) for s in sources]

    @contextmanager
    def _evaluating(self) -> Iterator[None]:
        """The network in eval mode (no dropout) for making, back in its mode afterwards."""
        network = self.run.network
        was_training = network.training
        network.eval()
        try:
            yield
        finally:
            network.train(was_training)

    def _teacher(self, m: MadePairs) -> torch.Tensor:
        """The distributions of the direction that made `m`'s sentences (from the translated side), at each
        position of the made sentences teacher-forced, as the made batch's soft targets."""
        run = self.run
        batch = make_batch(m.translated, m.made, m.from_lang, m.job.made_lang, run.prefix(m.from_lang, m.job.made_lang),
                           run.start(m.job.made_lang))
        with self._evaluating(), run.runtime.autocast():
            return run.network.target_distributions(batch)

    def _translate_grouped(self, requests: list[tuple[list[np.ndarray], str, str]],
                           generator: torch.Generator | None) -> list[tuple[list[list[int]], list[int]]]:
        """Each request (sentences, from language, into language) translated, as `_translate` gives it, with one
        search per language pair over all the requests of that pair."""
        groups: dict[tuple[str, str], list[int]] = {}
        for r, (seqs, from_lang, into) in enumerate(requests):
            if seqs:
                groups.setdefault((from_lang, into), []).append(r)
        out: list[tuple[list[list[int]], list[int]]] = [([], []) for _ in requests]
        for (from_lang, into), members in groups.items():
            sentences, limits = self._translate([x for r in members for x in requests[r][0]], from_lang, into,
                                                generator)
            at = 0
            for r in members:
                n = len(requests[r][0])
                out[r] = (sentences[at:at + n], limits[at:at + n])
                at += n
        return out

    @torch.no_grad()
    def _translate(self, seqs: list[np.ndarray], src_lang: str, tgt_lang: str,
                   generator: torch.Generator | None) -> tuple[list[list[int]], list[int]]:
        """`seqs` translated by the model as it is (greedy, sampled with `generator`, or beam search), as target
        ids, and each one's length limit (a sentence that reaches it never ended)."""
        run = self.run
        network, device = run.network, run.runtime.device
        ids, lengths = pad_sources(seqs, run.prefix(src_lang, tgt_lang))
        with run.runtime.autocast():
            bridged = network.run_encoder(ids.to(device), lengths.to(device), src_lang)
            limit = output_limits(lengths.to(device), self.cfg.max_len, run.cfg.preprocess.max_len,
                                  network.decoder_for(tgt_lang).max_length)
            if self.cfg.max_len is not None:
                limit = limit.clamp(max=run.cfg.preprocess.max_len)
            decoder, state = with_ngram_blocking(*network.start_decoding(bridged, tgt_lang), self.cfg.no_repeat_ngram)
            if self.cfg.decoding == "beam":
                return beam_search(decoder, state, limit, self.cfg.beam, start=run.start(tgt_lang)), limit.tolist()
            return greedy_search(decoder, state, limit, run.start(tgt_lang), sample=generator), limit.tolist()
