"""Which translation directions a run trains, and the seeded scheduler that rotates over them.

The papers cycle through source and target languages batch by batch, uniformly, so that
the shared bridge never drifts toward one language pair. The scheduler shuffles the list of
directions once per cycle with a seed derived from (seed, cycle): its whole state is two
integers, so a resumed run continues with exactly the same sequence.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from interlingua.config import DirectionsConfig, SyntheticConfig
from interlingua.errors import ConfigError

Direction = tuple[str, str]


def direction_name(d: Direction) -> str:
    """A direction as logs, records and checkpoints name it: "de-en"."""
    return f"{d[0]}-{d[1]}"


def build_directions(cfg: DirectionsConfig, corpus_languages: list[str]) -> list[Direction]:
    """Expand a directions config into the sorted list of trained (src, tgt) pairs."""
    langs = sorted(cfg.languages or corpus_languages)
    unknown = sorted(set(langs) - set(corpus_languages))
    mentioned = ({x for p in list(cfg.pairs) + list(cfg.held_out) for x in p}
                 | ({cfg.pivot} if cfg.mode == "pivot" else set()))
    unknown += sorted(mentioned - set(corpus_languages) - set(unknown))
    if unknown:
        raise ConfigError(f"invalid config directions: language(s) {', '.join(unknown)} not in the corpus "
                          f"(it has {', '.join(sorted(corpus_languages))})")
    if cfg.mode == "bilingual":
        dirs = [(cfg.pairs[0][0], cfg.pairs[0][1])]
    elif cfg.mode == "explicit":
        dirs = [(s, t) for s, t in cfg.pairs]
    elif cfg.mode == "pivot":
        if cfg.pivot not in langs:
            raise ConfigError(f"invalid config directions.pivot: '{cfg.pivot}' is not among the languages {langs}")
        others = [lang for lang in langs if lang != cfg.pivot]
        dirs = [(x, cfg.pivot) for x in others] + [(cfg.pivot, x) for x in others]
    else:
        dirs = [(a, b) for a in langs for b in langs if a != b]
    for p in dirs:
        if p[0] == p[1] and not cfg.monolingual:
            raise ConfigError(f"invalid config directions: {p[0]}->{p[1]} is a copy direction; "
                              "set monolingual: true instead")
    if cfg.monolingual:
        involved = sorted({x for p in dirs for x in p})
        dirs += [(x, x) for x in involved]
    held = {tuple(p) for p in cfg.held_out}
    missing = held - set(dirs)
    if missing and cfg.mode != "explicit":
        pretty = ", ".join(f"{a}->{b}" for a, b in sorted(missing))
        raise ConfigError(f"invalid config directions.held_out: {pretty} "
                          f"would not be trained anyway in mode '{cfg.mode}'")
    dirs = sorted(set(dirs) - held)
    if not dirs:
        raise ConfigError("invalid config directions: no direction left to train")
    return dirs


def zero_shot_directions(trained: list[Direction], languages: list[str]) -> list[Direction]:
    """Pairs of languages that have an encoder and a decoder but were never trained together."""
    enc = {s for s, _ in trained}
    dec = {t for _, t in trained}
    return [(a, b) for a in sorted(languages) for b in sorted(languages)
            if a != b and a in enc and b in dec and (a, b) not in trained]


def synthetic_directions(configured: list[tuple[str, str]] | None, zero_shot: list[Direction]) -> list[Direction]:
    """The directions `train.synthetic` makes pairs for: those configured, or every zero-shot direction."""
    return sorted(zero_shot if configured is None else {(s, t) for s, t in configured})


def check_synthetic(cfg: SyntheticConfig, trained: list[Direction], zero_shot: list[Direction]) -> None:
    """Refuse a `train.synthetic` the run cannot make pairs for, before the first step: a pivot that is not
    one of its languages, a direction no encoder and decoder of the model can train, a language filter
    that does not know its languages."""
    if not cfg.modes:
        return
    sources, targets = sorted({s for s, _ in trained}), sorted({t for _, t in trained})
    languages = sorted(set(sources) | set(targets))
    if "pivot" in cfg.modes and cfg.pivot not in languages:
        raise ConfigError(f"invalid config train.synthetic.pivot: '{cfg.pivot}' is not one of the run's languages "
                          f"({', '.join(languages)})")
    bad = [f"{s}->{t}" for s, t in synthetic_directions(cfg.directions, zero_shot)
           if s == t or s not in sources or t not in targets]
    if bad:
        raise ConfigError(f"invalid config train.synthetic.directions: {', '.join(bad)} cannot be trained by this "
                          f"model (a direction needs a source language with an encoder, {', '.join(sources)}, and "
                          f"another target language with a decoder, {', '.join(targets)})")
    if cfg.language_filter:
        from interlingua.data.language_id import supported  # imports langid: only when asked for
        if not supported(languages):
            raise ConfigError("invalid config train.synthetic.language_filter: the language identifier does not "
                              f"know all of {', '.join(languages)}")


def pair_shares(directions: list[Direction], pair_lines: str) -> dict[Direction, tuple[int, int]]:
    """Each direction's share (index, count) of the training lines for `directions.pair_lines`:
    `disjoint` one share per unordered language pair (sorted), so A->B and B->A train on the same
    lines and no two pairs on the same ones; `common` share 0 for every pair; `all` none. Copy
    directions (A->A) get no share: they keep all lines."""
    if pair_lines == "all":
        return {}
    pairs = sorted({tuple(sorted(d)) for d in directions if d[0] != d[1]})
    return {d: (pairs.index(tuple(sorted(d))) if pair_lines == "disjoint" else 0, len(pairs))
            for d in directions if d[0] != d[1]}


@dataclass
class DirectionScheduler:
    """Uniform rotation over directions, reshuffled each cycle from (seed, cycle)."""

    directions: list[Direction]
    seed: int
    cycle: int = 0
    position: int = 0

    def _order(self) -> list[Direction]:
        order = list(self.directions)
        random.Random(self.seed * 1_000_003 + self.cycle).shuffle(order)
        return order

    def next(self) -> Direction:
        d = self._order()[self.position]
        self.position += 1
        if self.position == len(self.directions):
            self.position, self.cycle = 0, self.cycle + 1
        return d

    def state_dict(self) -> dict:
        return {"cycle": self.cycle, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.cycle, self.position = int(state["cycle"]), int(state["position"])
