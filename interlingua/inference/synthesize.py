"""`interlingua synthesize`: pivot-based synthetic pairs as files, for users who prefer to train on files
(the offline form of `train.synthetic` `pivot` mode; Chen et al. 2017, Lakew et al. 2017).

For each requested direction x -> Y, every training line that has x and the pivot language e is kept
with its real x side and paired with its e side translated into Y by the model's supervised e -> Y:
the pair group `synthetic.x-Y` of (real x, made Y). A direction Y -> x is served by the same group
read the other way; asking for both x -> Y and Y -> x gives each real->made and made->real pairs.

The corpus YAML written beside the files holds the corpus's other splits as they were and its training
lines re-grouped so that no group pairs two languages besides the pivot: a multi-way corpus (line i of
every language is the same sentence) would otherwise give the zero-resource directions their real pairs.
A training config that names this YAML as its corpus trains on the synthetic pairs (e.g. `mode:
many2many` without `held_out`), and its reports call those directions what they are.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from interlingua.data.corpus import ParallelGroup, load_corpus, read_group, write_corpus_yaml, write_lines_gz
from interlingua.data.directions import Direction
from interlingua.errors import DataError, LanguageError
from interlingua.inference.api import Model


@dataclass(frozen=True)
class SyntheticCorpus:
    """What `synthesize` wrote: the corpus YAML, and the synthetic pairs per direction."""

    corpus: Path
    pairs: dict[str, int]
    """"x-Y" -> lines of (real x, made Y)."""


def synthesize(model: Model, corpus: str | Path, out: str | Path, pivot: str = "en",
               directions: list[Direction] | None = None, *, split: str = "train", beam: int = 1,
               batch_size: int = 64, max_lines: int | None = None, progress: bool = True) -> SyntheticCorpus:
    """Write the synthetic pair files of `directions` (default: the model's zero-shot directions whose two
    legs through `pivot` were trained) and a corpus YAML with them into `out`."""
    languages = model.languages
    trained = set(languages.trained)
    if pivot not in languages.sources or pivot not in languages.targets:
        raise LanguageError(f"pivot '{pivot}' needs an encoder and a decoder in the model "
                            f"(sources: {', '.join(languages.sources)}; targets: {', '.join(languages.targets)})")
    if directions is None:
        directions = [(x, y) for x, y in languages.zero_shot if (pivot, y) in trained and pivot not in (x, y)]
    if not directions:
        raise LanguageError(f"no direction to make pairs for: the model has no zero-shot direction whose target "
                            f"it translates into from '{pivot}'")
    for x, y in directions:
        if pivot in (x, y) or x == y:
            raise LanguageError(f"{x}->{y}: synthetic pairs are made through the pivot '{pivot}' for a direction "
                                "between two other languages")
        if (pivot, y) not in trained:
            raise LanguageError(f"{x}->{y}: the model was not trained on {pivot}->{y}, which would make the {y} side")
    source = load_corpus(corpus)
    if source.source is None:
        raise DataError(f"corpus {corpus} has no file")
    groups = [g for g in source.groups(split) if pivot in g.files]
    for x, _ in directions:  # before any translating: a missing side surfaced only after the directions before it
        if not any(x in g.files for g in groups):
            raise DataError(f"split '{split}' of {source.source} has no file of {x} beside one of {pivot}, so no "
                            f"{x} sentence to pair with a made translation")
    dest = Path(out)
    dest.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    made_pairs: dict[str, dict[str, str]] = {}
    for x, y in directions:
        kept: list[str] = []
        made: list[str] = []
        for group in (g for g in groups if x in g.files):
            texts = read_group(ParallelGroup(group.name, {x: group.files[x], pivot: group.files[pivot]}),
                               limit=None if max_lines is None else max_lines - len(kept))
            lines = [(a, e) for a, e in zip(texts[x], texts[pivot]) if a.strip() and e.strip()]
            kept += [a for a, _ in lines]
            made += model.translate([e for _, e in lines], pivot, y, beam=beam, batch_size=batch_size,
                                    progress=progress)
            if max_lines is not None and len(kept) >= max_lines:
                break
        if not kept:
            raise DataError(f"split '{split}' of {source.source} has no line with both {x} and {pivot}")
        name = f"synthetic.{x}-{y}"
        files = {x: dest / f"{name}.{x}.gz", y: dest / f"{name}.{y}.gz"}
        write_lines_gz(files[x], kept)
        write_lines_gz(files[y], made)
        made_pairs[name] = {lang: path.name for lang, path in files.items()}
        counts[f"{x}-{y}"] = len(kept)
    return SyntheticCorpus(write_corpus_yaml(dest, _spec(source.name, source.languages, source.splits, split, pivot,
                                                         made_pairs, dest)), counts)


def _spec(name: str, languages: list[str], splits: dict[str, list[ParallelGroup]], split: str, pivot: str,
          made: dict[str, dict[str, str]], dest: Path) -> dict:
    """The corpus YAML: other splits as they were, the training groups cut into pivot pairs, the synthetic groups."""
    def rel(path: Path) -> str:
        return os.path.relpath(path.resolve(), dest.resolve())

    multiway: dict[str, dict[str, str]] = {}
    pairs: dict[str, dict[str, dict[str, str]]] = {}
    for name_of_split, groups in splits.items():
        for i, g in enumerate(groups):
            files = {lang: rel(p) for lang, p in g.files.items()}
            if name_of_split != split:
                if g.name == "multiway":
                    multiway[name_of_split] = files
                else:
                    pairs.setdefault(name_of_split, {})[g.name] = files
                continue
            others = [lang for lang in files if lang != pivot]
            if pivot not in files or len(others) <= 1:
                pairs.setdefault(split, {})[f"{g.name}.{i}"] = files
                continue
            for lang in others:  # never two real sides of one line besides the pivot
                pairs.setdefault(split, {})[f"{g.name}.{i}.{pivot}-{lang}"] = {pivot: files[pivot], lang: files[lang]}
    pairs.setdefault(split, {}).update(made)
    spec = {"name": f"{name}+synthetic", "languages": languages, "splits": multiway, "pairs": pairs}
    return {k: v for k, v in spec.items() if v}
