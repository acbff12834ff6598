"""What reading a model file gives, typed: `LoadedModel`, and its `Provenance` (what the file records of the
weights: where they were read, their training step, the languages added, the checkpoints averaged, ...).

Only `interlingua.model_files` knows how a file stores them (`checkpoint.load_checkpoint` and
`folder.load_folder` fill these records); everything else reads their fields.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from interlingua.config import ExperimentConfig
from interlingua.data.vocab import Vocab
from interlingua.modules.model import TranslationNetwork

FileKind = Literal["checkpoint", "folder"]
"""A `.pt` checkpoint, or a model folder from `interlingua export folder` / `Model.save`."""


@dataclass(frozen=True)
class AddedLanguage:
    """A language `interlingua extend` added to a trained shared model (a file's `extended` entries, oldest
    first)."""

    lang: str
    source: str
    """The model file it was added to (stored as "from")."""
    vocab_size: int
    noise: float
    seed: int

    def to_json(self) -> dict[str, Any]:
        return {"lang": self.lang, "from": self.source, "vocab_size": self.vocab_size, "noise": self.noise,
                "seed": self.seed}

    @classmethod
    def from_json(cls, entry: object) -> AddedLanguage:
        """One stored entry; a KeyError or TypeError where it is malformed (the reader names the file)."""
        if not isinstance(entry, Mapping):
            raise TypeError(f"'extended' entry {entry!r} is not a mapping")
        return cls(lang=entry["lang"], source=entry["from"], vocab_size=entry["vocab_size"], noise=entry["noise"],
                   seed=entry["seed"])


@dataclass(frozen=True)
class RecordedResults:
    """What a model card reports of the weights, as recorded (never recomputed): the training summary, where
    its dev BLEU came from, and the test BLEU matrices found beside the checkpoint. Plain JSON, passed
    through to the card."""

    training: dict[str, Any] | None = None
    """`TrainingState.summary()`, its `dev` completed from metrics.jsonl where the state had none."""
    dev_from: str | None = None
    """"checkpoint" or "metrics.jsonl"; None where no dev validation of the step was recorded."""
    test: tuple[dict[str, Any], ...] = ()
    """The `eval/bleu_*.json` matrices beside the checkpoint (see `folder.test_results`)."""

    def to_json(self) -> dict[str, Any]:
        return {"training": self.training, "dev_from": self.dev_from, "test": list(self.test)}

    @classmethod
    def from_json(cls, stored: Mapping[str, Any]) -> RecordedResults:
        training = stored.get("training")
        return cls(training=training if isinstance(training, dict) else None, dev_from=stored.get("dev_from"),
                   test=tuple(stored.get("test") or ()))


@dataclass(frozen=True)
class Provenance:
    """What a model file records of its weights, beside the network and vocabularies it rebuilds."""

    kind: FileKind
    source: Path | None = None
    """The file or folder read; None where the weights are not that file's (`Model.untrained_like`)."""
    step: int | None = None
    """The training step the weights were saved at; None where the file holds no training state."""
    training: dict[str, Any] | None = None
    """What a model card reports of the training state (`TrainingState.summary()`, plain JSON); a folder's
    as recorded at export; None without one."""
    extended: tuple[AddedLanguage, ...] = ()
    averaged_from: tuple[str, ...] = ()
    """The checkpoints whose weights these are the mean of (`interlingua average`)."""
    exported_from: str | None = None
    """A model folder's: the name of the file it was exported from."""
    recorded: RecordedResults | None = None
    """A model folder's: the results its card reports, as recorded at export."""


@dataclass
class LoadedModel:
    """A model file rebuilt for use: the network (eval mode), its vocabularies and config, the trained
    directions and the file's `Provenance`. Neither the optimizer nor the rest of a training state is kept."""

    network: TranslationNetwork
    vocabs: dict[str, Vocab]
    config: ExperimentConfig
    directions: list[tuple[str, str]]
    provenance: Provenance
