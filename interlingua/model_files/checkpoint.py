"""Self-contained checkpoints: config + vocabularies + weights (+ training state), written atomically.

One file is enough to translate or embed. Writing goes to a temporary file in the same
folder, is flushed to disk, then renamed over the old file, so a kill mid-write never
destroys the previous checkpoint.

`Checkpoint` and `TrainingState` are the file's content, typed; this module alone knows how they
are laid out on disk (a dict `torch.load(weights_only=True)` reads), so every other module reads
fields, not keys. The training state's history (`records.Validation`s) was stored as a JSON string
before it was stored as a list; both read alike.
"""
from __future__ import annotations

import json
import math
import os
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from interlingua.atomic_files import atomic_output, check_writable, output_target
from interlingua.config import ExperimentConfig, parse_config
from interlingua.data.vocab import Vocab, vocab_offsets, vocabs_from_protos
from interlingua.errors import CheckpointError, InterlinguaError, RecordError, one_line
from interlingua.memory import memory_for
from interlingua.model_files.loaded import AddedLanguage, LoadedModel, Provenance
from interlingua.modules.model import TranslationNetwork
from interlingua.records import Validation

FORMAT = "interlingua-checkpoint"
VERSION = 2
"""The newest format this version reads. 2 adds `vocab_offsets` (a language added to a trained shared
model, `interlingua extend`) and is written only by such checkpoints; all others are written as 1."""
PLAIN_VERSION = 1


def save_atomic(obj: dict[str, Any], path: str | Path) -> None:
    """`torch.save` whole or not at all (`atomic_output`): the previous file stays until the new one is
    complete, and a full disk is an `OSError(ENOSPC)` naming `path`, not torch's RuntimeError."""
    with atomic_output(path) as f:
        torch.save(obj, f)


@dataclass
class TrainingState:
    """Everything a run needs to go on exactly where it stopped (`train --resume`), and what a model
    card reports of the weights' training. The optimizer, schedules, batch positions and RNG are
    the state dicts of their own objects, stored as they give them."""

    step: int = 0
    max_steps: int | None = None
    """The step the run stops at (with `train.epochs`, worked out by the run itself)."""
    elapsed: float = 0.0
    """Seconds of training (steps only: validations and saves are not counted)."""
    best_bleu: float | None = None
    history: list[Validation] = field(default_factory=list)
    """The validation records so far, oldest first (stored as in metrics.jsonl)."""
    optimizer: dict[str, Any] | None = None
    direction_scheduler: dict[str, Any] | None = None
    """The direction scheduler's position (stored under the key "scheduler", as ever)."""
    lr_scheduler: dict[str, Any] | None = None
    """None in checkpoints written before the learning-rate schedule existed (a constant lr)."""
    batches: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per direction ("src-tgt"), the position of its batch plan."""
    torch_rng: Any = None
    grad_scaler: dict[str, Any] | None = None
    log_window: dict[str, Any] = field(default_factory=dict)
    """The running sums of the log line not yet written."""
    init: str | None = None
    """The checkpoint a fine-tuning run started from (`train --init`); None for a run from scratch."""

    def to_payload(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "max_steps": self.max_steps,
            "elapsed": self.elapsed,
            "best_bleu": self.best_bleu,
            "optimizer": self.optimizer,
            "scheduler": self.direction_scheduler,
            **({"lr_scheduler": self.lr_scheduler} if self.lr_scheduler is not None else {}),
            "batches": self.batches,
            "torch_rng": self.torch_rng,
            "grad_scaler": self.grad_scaler,
            "history": [v.to_json() for v in self.history],
            "log_window": self.log_window,
            **({"init": self.init} if self.init else {}),
        }

    @classmethod
    def from_payload(cls, stored: dict[str, Any], path: str | Path) -> TrainingState:
        """The training state as stored; missing entries read as their defaults (whether they are enough
        to resume from is for the run to find when it loads them)."""
        history = stored.get("history") or []
        if isinstance(history, str):  # written before the history was stored as a list
            try:
                history = json.loads(history)
            except ValueError:
                raise CheckpointError(f"{path}: its training history is not readable (corrupt checkpoint?)") from None
        if not isinstance(history, list):
            raise CheckpointError(f"{path}: its training history is not a list (corrupt checkpoint?)")
        try:
            validations = [Validation.from_json(r) for r in history]
        except RecordError as err:
            raise CheckpointError(f"{path}: its training history is malformed (corrupt checkpoint?): {err}") from None
        return cls(step=stored.get("step", 0), max_steps=stored.get("max_steps"), elapsed=stored.get("elapsed", 0.0),
                   best_bleu=stored.get("best_bleu"), history=validations, optimizer=stored.get("optimizer"),
                   direction_scheduler=stored.get("scheduler"), lr_scheduler=stored.get("lr_scheduler"),
                   batches=stored.get("batches") or {}, torch_rng=stored.get("torch_rng"),
                   grad_scaler=stored.get("grad_scaler"), log_window=dict(stored.get("log_window") or {}),
                   init=stored.get("init") or None)

    @property
    def validated(self) -> bool:
        """Whether the validation owed at this step is done (its record is the history's last)."""
        return bool(self.history) and self.history[-1].step == self.step

    def summary(self) -> dict[str, Any]:
        """The small, plain-JSON part that describes the weights (for model cards): the step, the steps
        planned, the training time, the best dev mean BLEU so far and the dev validation recorded at
        this very step (None where the history has none). Non-finite numbers become None, so the
        result is valid JSON."""
        dev = next((v for v in reversed(self.history) if v.step == self.step), None)
        return finite_json({"step": self.step, "max_steps": self.max_steps, "elapsed_s": self.elapsed,
                            "best_dev_bleu": self.best_bleu, "dev": dev.to_json() if dev else None,
                            "init": self.init})


@dataclass
class Checkpoint:
    """One checkpoint file: what rebuilds the model (config, vocabularies, languages, weights), the
    directions it was trained on, and for a training run's files its `TrainingState`."""

    config: dict[str, Any]
    """The config as stored (plain JSON); `experiment_config()` parses it into today's shape."""
    vocab_protos: dict[str, bytes]
    """Per language, its sentencepiece model (languages that share one share the bytes)."""
    encoder_langs: list[str]
    decoder_langs: list[str]
    directions: list[tuple[str, str]]
    weights: dict[str, torch.Tensor]
    vocab_offsets: dict[str, int] | None = None
    """Per language, the offset of its ids where a language was added (`interlingua extend`)."""
    training: TrainingState | None = None
    extended: list[AddedLanguage] | None = None
    """The languages `interlingua extend` added, oldest first."""
    averaged_from: list[str] | None = None
    """The checkpoints whose weights these are the mean of (`interlingua average`)."""
    path: Path | None = field(default=None, compare=False)
    """The file it was read from (for messages); None for one built in memory."""

    @classmethod
    def of(cls, cfg: ExperimentConfig, network: TranslationNetwork, vocabs: dict[str, Vocab],
           directions: list[tuple[str, str]], training: TrainingState | None = None) -> Checkpoint:
        """The checkpoint of a model in use: its weights as they are now (not copied)."""
        return cls(config=cfg.model_dump(mode="json"), vocab_protos={lang: v.proto for lang, v in vocabs.items()},
                   encoder_langs=network.encoder_langs, decoder_langs=network.decoder_langs,
                   directions=[(s, t) for s, t in directions], weights=network.state_dict(),
                   vocab_offsets=vocab_offsets(vocabs) or None, training=training)

    @classmethod
    def read(cls, path: str | Path) -> Checkpoint:
        return cls.from_payload(read_checkpoint(path), path)

    @classmethod
    def from_payload(cls, payload: dict[str, Any], path: str | Path) -> Checkpoint:
        try:
            training, extended = payload.get("training"), payload.get("extended")
            return cls(config=payload["config"], vocab_protos=payload["vocabs"],
                       encoder_langs=list(payload["encoder_langs"]), decoder_langs=list(payload["decoder_langs"]),
                       directions=[(s, t) for s, t in payload["directions"]], weights=payload["model"],
                       vocab_offsets=payload.get("vocab_offsets") or None,
                       training=TrainingState.from_payload(training, path) if isinstance(training, dict) else None,
                       extended=[AddedLanguage.from_json(e) for e in extended] if extended is not None else None,
                       averaged_from=payload.get("averaged_from"), path=Path(path))
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(f"{path} is incomplete (corrupt checkpoint?): missing or malformed "
                                  f"{one_line(err)}") from None

    def to_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION if self.vocab_offsets else PLAIN_VERSION,
            "config": self.config,
            "vocabs": self.vocab_protos,
            "encoder_langs": self.encoder_langs,
            "decoder_langs": self.decoder_langs,
            "directions": [list(d) for d in self.directions],
            "model": self.weights,
        }
        if self.vocab_offsets:
            payload["vocab_offsets"] = self.vocab_offsets
        if self.training is not None:
            payload["training"] = self.training.to_payload()
        if self.extended is not None:
            payload["extended"] = [e.to_json() for e in self.extended]
        if self.averaged_from is not None:
            payload["averaged_from"] = self.averaged_from
        return payload

    def save(self, path: str | Path) -> None:
        save_atomic(self.to_payload(), path)

    def experiment_config(self) -> ExperimentConfig:
        """The config it was written with, in today's shape: checkpoints written before the model's
        slots had kinds lack `model.decoder.type` (and read as the default kinds)."""
        return parse_config(self.config, source=f"stored in {self.path}")

    def load_vocabs(self) -> dict[str, Vocab]:
        """The vocabularies (with their offsets where a language was added)."""
        return vocabs_from_protos(self.vocab_protos, self.vocab_offsets)


def build_payload(cfg: ExperimentConfig, network: TranslationNetwork, vocabs: dict[str, Vocab],
                  directions: list[tuple[str, str]], training: TrainingState | None = None) -> dict[str, Any]:
    """The file content of `Checkpoint.of(...)` (for tools and tests that write files by hand)."""
    return Checkpoint.of(cfg, network, vocabs, directions, training).to_payload()


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The file's content as stored, checked to be a checkpoint this version reads (a plain dict, for
    tools that rewrite files; everything else reads `Checkpoint.read`)."""
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"{path} is a folder: this needs a .pt checkpoint (a model folder written by "
                              f"`interlingua export folder` is for translation and embedding only)")
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many kinds for truncated/garbled files
        raise CheckpointError(f"{path} is not a readable checkpoint (truncated or corrupt?): "
                              f"{_unreadable_because(path, err)}") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an interlingua checkpoint")
    check_format_version(payload.get("version", 0), VERSION, "checkpoint format", path)
    return payload


def _unreadable_because(path: Path, err: Exception) -> str:
    """Why torch.load failed, in the user's terms: torch's own messages are long and, for a file that holds
    more than tensors, advise loading it with `weights_only=False`, which would run code from the file."""
    if path.stat().st_size == 0:
        return "the file is empty"
    if not zipfile.is_zipfile(path):
        return "no complete PyTorch zip archive in it (cut short, or another kind of file)"
    if "weights only load failed" in str(err).lower():
        return ("it holds Python objects besides tensors and plain data, which interlingua does not unpickle "
                "(not written by interlingua)")
    return one_line(err, limit=10_000).split(". ")[0][:200]  # torch's first sentence


def check_format_version(version: object, newest: int, kind: str, path: str | Path) -> None:
    """A stored format `version` this interlingua reads (up to `newest`), or the error that says to upgrade."""
    if not isinstance(version, int):
        raise CheckpointError(f"{path} is not readable ({kind} version {version!r})")
    if version > newest:
        raise CheckpointError(f"{path} was written by a newer interlingua ({kind} {version}, this version reads up "
                              f"to {newest}): upgrade interlingua to load it")


def finite_json(value: Any) -> Any:
    """`value` with NaN and infinities replaced by None (JSON has no such numbers)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value if value is None or isinstance(value, (str, int, bool)) else str(value)


def load_checkpoint(path: str | Path, device: torch.device | str = "cpu") -> LoadedModel:
    """Rebuild the model and vocabularies of a `.pt` checkpoint, in eval mode, on `device` (a model folder
    is `folder.load_folder`'s; `load.load_model` reads either).

    The training state (optimizer moments, RNG, counters) is dropped as soon as the file is read (but
    for its `summary`), and the checkpoint's weights once they are in the model, so that a loaded
    model holds its weights once."""
    ckpt = Checkpoint.read(path)
    step = ckpt.training.step if ckpt.training is not None else None
    summary = ckpt.training.summary() if ckpt.training is not None else None
    ckpt.training = None
    try:
        cfg = ckpt.experiment_config()
        vocabs = ckpt.load_vocabs()
        with memory_for(f"the model of {path}"):
            network = TranslationNetwork(cfg.model, {lang: len(v) for lang, v in vocabs.items()},
                                       ckpt.encoder_langs, ckpt.decoder_langs)
        network.load_state_dict(ckpt.weights)
        check_finite(ckpt.weights, path)
        ckpt.weights = {}
        network.restrict_to_vocabs(vocabs)
    except (KeyError, RuntimeError, TypeError, ValueError) as err:
        # load_state_dict's first line names no tensor: all of it, on one line
        raise CheckpointError(f"{path} does not match its own config (corrupt checkpoint?): {one_line(err)}") from None
    with memory_for(f"the model of {path}", device):
        network.to(device).eval()
    provenance = Provenance("checkpoint", Path(path), int(step) if isinstance(step, int) else None, summary,
                            tuple(ckpt.extended or ()), tuple(ckpt.averaged_from or ()))
    return LoadedModel(network, vocabs, cfg, list(ckpt.directions), provenance)


def check_finite(weights: Mapping[str, torch.Tensor], path: str | Path) -> None:
    """Refuse weights holding NaN or an infinity, naming the first such tensor: they load and run
    without any error, but every translation through them is empty or garbage (a damaged file, or
    one saved by a run whose loss diverged)."""
    bad = [name for name, t in weights.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if bad:
        count = int((~torch.isfinite(weights[bad[0]])).sum())
        others = f" (and {len(bad) - 1} other tensor(s))" if len(bad) > 1 else ""
        raise CheckpointError(f"{path}: weight '{bad[0]}' holds {count} non-finite value(s) (NaN or infinity){others}: "
                              f"the file is damaged or was saved by a run whose loss diverged")


_SAME_CONFIG = ("model", "directions", "preprocess")


def _run_identity(ckpt: Checkpoint) -> dict[str, Any]:
    """What checkpoints of one run share, by their names in the file."""
    return {"vocabs": ckpt.vocab_protos, "vocab_offsets": ckpt.vocab_offsets, "encoder_langs": ckpt.encoder_langs,
            "decoder_langs": ckpt.decoder_langs, "directions": ckpt.directions}


def holds_training_state(path: str | Path) -> bool:
    """Whether `path` is a checkpoint a run resumes from (it holds an optimizer's state). Memory-mapped:
    asking reads the small entries, not the weights."""
    path = Path(path)
    if not path.is_file() or not zipfile.is_zipfile(path):
        return False
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # not a checkpoint torch reads: then not a training one either
        return False
    training = payload.get("training") if isinstance(payload, dict) else None
    return isinstance(training, dict) and bool(training.get("optimizer"))


def check_output(out: str | Path, inputs: Sequence[str | Path | None], *, force: bool = False,
                 flag: str = "--out") -> None:
    """Refuse to write `out` where that would replace one of the command's own `inputs` (by any name) or a
    checkpoint that holds training state: either is one mistyped argument away, and gone once replaced.
    `force` writes anyway. A device, FIFO or /dev/stdout replaces nothing and is always accepted."""
    target, streamed = output_target(out)
    if not streamed:
        check_writable(target)
    if force or streamed or not target.is_file():
        return
    for given in inputs:
        if given is not None and Path(given).exists() and os.path.samefile(target, given):
            raise InterlinguaError(f"{flag} {out} is also one of this command's inputs: give another file, "
                                   f"or --force to replace it")
    if holds_training_state(target):
        raise InterlinguaError(f"{out} is a training checkpoint (it holds the optimizer state `train --resume` "
                               f"continues from): give another file, or --force to replace it")


def average_checkpoints(paths: Sequence[str | Path], out: str | Path, *, force: bool = False) -> Path:
    """Average the weights of checkpoints of one run (same model, directions, preprocessing and
    vocabularies) into a translation-only checkpoint at `out` (no training state); returns `out`. An `out`
    that is one of `paths` or a training checkpoint is refused unless `force` (`check_output`).

    Floating-point tensors are averaged in float64 and stored in their own dtype; tensors that
    share storage in the first checkpoint (tied embeddings) share it in the average too."""
    files = [Path(p) for p in paths]
    if not files:
        raise CheckpointError("average needs at least one checkpoint")
    check_output(out, files, force=force)
    first = Checkpoint.read(files[0])
    first.training = None
    cfg = first.experiment_config().model_dump(mode="json")
    same = _run_identity(first)
    ref = first.weights
    sums: dict[str, torch.Tensor] = {k: v.double() if v.is_floating_point() else v for k, v in ref.items()}
    for path in files[1:]:
        ckpt = Checkpoint.read(path)
        other = ckpt.experiment_config().model_dump(mode="json")
        differs = ([f"config section '{s}'" for s in _SAME_CONFIG if other[s] != cfg[s]]
                   + [f"'{k}'" for k, v in _run_identity(ckpt).items() if v != same[k]])
        weights = ckpt.weights
        if not differs and weights.keys() != ref.keys():
            differs = ["the weights' names"]
        if not differs:
            differs = [f"the shape of '{k}'" for k, v in weights.items() if v.shape != ref[k].shape][:1]
        if differs:
            raise CheckpointError(f"cannot average {path} with {files[0]}: {differs[0]} differs "
                                  f"(only checkpoints of the same run can be averaged)")
        for k, v in weights.items():
            if v.is_floating_point():
                sums[k] += v.double()
        del ckpt, weights
    averaged: dict[str, torch.Tensor] = {}
    shared: dict[tuple[Any, ...], torch.Tensor] = {}
    for k, v in ref.items():
        if not v.is_floating_point():
            averaged[k] = v
            continue
        key = (v.untyped_storage().data_ptr(), v.storage_offset(), tuple(v.shape), tuple(v.stride()))
        if key not in shared:
            shared[key] = (sums[k] / len(files)).to(v.dtype)
        averaged[k] = shared[key]
    first.weights, first.averaged_from = averaged, [str(p) for p in files]
    out = Path(out)
    first.save(out)
    return out
