"""What a suite run is given: the time budget (sizes, folds) and the context the suites of `all` share."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import overload

from interlingua.evaluation.sentence.probing import ProbeConfig
from interlingua.evaluation.sentence.probing_sets import SplitSizes
from interlingua.evaluation.sentence.protocol import CachedEmbedder
from interlingua.evaluation.sentence.tasks import Labelled, Pairs, subsample


@dataclass(frozen=True)
class Budget:
    """Sizes and fold counts; the defaults keep `all` on a real model inside 30 minutes on 2 cores."""

    cv_folds: int = 10
    inner_folds: int = 3
    xnli_folds: int = 5
    xnli_inner_folds: int = 3
    sst_train: int | None = 20000
    probe_sizes: SplitSizes = SplitSizes(6000, 1000, 1000)
    official_probe_limits: SplitSizes | None = SplitSizes(10000, 1000, 1000)
    wc_words: int = 1000
    per_head_train: int | None = 2000
    parse_limit: int | None = 40000
    max_examples: int | None = None  # cap on every split of every data set (seeded subsets)
    probe_checks: int | None = None  # dev checks a probe makes at most (None: ProbeConfig's)

    @classmethod
    def make(cls, quick: bool = False, max_examples: int | None = None) -> Budget:
        """The full budget, or a seconds-long smoke budget with `quick`."""
        if not quick:
            return cls(max_examples=max_examples)
        small = SplitSizes(400, 120, 120)
        return cls(cv_folds=3, inner_folds=2, xnli_folds=3, xnli_inner_folds=2, sst_train=500, probe_sizes=small,
                   official_probe_limits=small, wc_words=40, per_head_train=300, parse_limit=1500,
                   max_examples=max_examples or 400, probe_checks=6)


@dataclass
class Context:
    """Everything a suite needs; encoders keep their caches across the suites of `all`."""

    encoders: dict[str, CachedEmbedder]
    data_root: Path
    out_dir: Path
    budget: Budget
    seed: int = 0
    features: str = "full"
    probing_dir: Path | None = None
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    per_head_embedders: list[str] | None = None  # None: every embedder that has heads
    jobs: int = 1  # worker processes for the probe fits

    @property
    def names(self) -> list[str]:
        """The embedders in column order."""
        return list(self.encoders)

    @overload
    def cap(self, items: Labelled, salt: int = 0) -> Labelled: ...
    @overload
    def cap(self, items: Pairs, salt: int = 0) -> Pairs: ...
    def cap(self, items: Labelled | Pairs, salt: int = 0) -> Labelled | Pairs:
        """A seeded subset within `budget.max_examples`; `salt` keeps the splits of one set independent."""
        return subsample(items, self.budget.max_examples, self.seed + salt)

    def settings(self) -> dict[str, object]:
        """The run's settings as reports print them, split sizes written train/dev/test."""
        budget = asdict(self.budget)
        for key in ("probe_sizes", "official_probe_limits"):
            if budget[key] is not None:
                budget[key] = "/".join(str(v) for v in budget[key].values())
        return {"seed": self.seed, "fit_workers": self.jobs, **budget}
