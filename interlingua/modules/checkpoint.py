"""Self-contained checkpoints: config + vocabularies + weights (+ training state), written atomically.

One file is enough to translate or embed. Writing goes to a temporary file in the same
folder, is flushed to disk, then renamed over the old file, so a kill mid-write never
destroys the previous checkpoint.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from interlingua.atomic_files import atomic_output
from interlingua.config import ExperimentConfig, parse_config
from interlingua.data.vocab import Vocab, vocab_offsets, vocabs_from_protos
from interlingua.errors import CheckpointError
from interlingua.modules.model import TranslationModel

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


def build_payload(cfg: ExperimentConfig, model: TranslationModel, vocabs: dict[str, Vocab],
                  directions: list[tuple[str, str]], training_state: dict[str, Any] | None = None) -> dict[str, Any]:
    offsets = vocab_offsets(vocabs)
    payload: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION if offsets else PLAIN_VERSION,
        "config": cfg.model_dump(mode="json"),
        "vocabs": {lang: v.proto for lang, v in vocabs.items()},
        "encoder_langs": model.encoder_langs,
        "decoder_langs": model.decoder_langs,
        "directions": [list(d) for d in directions],
        "model": model.state_dict(),
    }
    if offsets:
        payload["vocab_offsets"] = offsets
    if training_state is not None:
        payload["training"] = training_state
    return payload


def checkpoint_vocabs(payload: dict[str, Any]) -> dict[str, Vocab]:
    """The vocabularies stored in a checkpoint's payload (with their offsets where a language was added)."""
    return vocabs_from_protos(payload["vocabs"], payload.get("vocab_offsets"))


def restrict_to_vocabs(model: TranslationModel, vocabs: dict[str, Vocab]) -> None:
    """Each target language produces only its own vocabulary's ids (only where a language was added)."""
    if vocab_offsets(vocabs):
        model.restrict_outputs({lang: v.id_ranges() for lang, v in vocabs.items()})


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"{path} is a folder: this needs a .pt checkpoint (a model folder written by "
                              f"`interlingua export folder` is for translation and embedding only)")
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many kinds for truncated/garbled files
        detail = " ".join(str(err).split())[:200] or type(err).__name__  # some carry no message at all
        raise CheckpointError(f"{path} is not a readable checkpoint (truncated or corrupt?): {detail}") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an interlingua checkpoint")
    check_format_version(payload.get("version", 0), VERSION, "checkpoint format", path)
    return payload


def check_format_version(version: object, newest: int, kind: str, path: str | Path) -> None:
    """A stored format `version` this interlingua reads (up to `newest`), or the error that says to upgrade."""
    if not isinstance(version, int):
        raise CheckpointError(f"{path} is not readable ({kind} version {version!r})")
    if version > newest:
        raise CheckpointError(f"{path} was written by a newer interlingua ({kind} {version}, this version reads up "
                              f"to {newest}): upgrade interlingua to load it")


def stored_config(payload: dict[str, Any], path: str | Path) -> ExperimentConfig:
    """The config a checkpoint was written with, in today's shape: checkpoints written before the
    model's slots had kinds lack `model.decoder.type` (and read as the default kinds)."""
    return parse_config(payload["config"], source=f"stored in {path}")


@dataclass
class LoadedModel:
    """A checkpoint rebuilt for use: the model (eval mode), its vocabularies and config, the trained
    directions and the payload's small metadata; the optimizer and the rest of the training state are
    not kept (`step` and the `training_summary` a model card reports are all that is read from it).
    A model folder loads into the same (`payload`: its config.json, `payload_path`: the folder)."""

    model: TranslationModel
    vocabs: dict[str, Vocab]
    config: ExperimentConfig
    directions: list[tuple[str, str]]
    payload: dict[str, Any]
    """The checkpoint's entries other than the weights and the training state (format, config, languages)."""
    payload_path: Path | None = None
    step: int | None = None
    """The training step the checkpoint was written at (None where it holds no training state)."""
    training: dict[str, Any] | None = None
    """What a model card reports of the training state (`training_summary`), plain JSON; None without one."""


def training_summary(training: Any) -> dict[str, Any] | None:
    """The small, plain-JSON part of a training state that describes the weights (for model cards):
    the step, the steps planned, the training time, the best dev mean BLEU so far and the dev
    validation recorded at this very step (None where the history has none). Non-finite numbers
    become None, so the result is valid JSON."""
    if not isinstance(training, dict):
        return None
    step = training.get("step")
    try:
        history = json.loads(training.get("history") or "[]")
    except (TypeError, ValueError):
        history = []
    dev = next((r for r in reversed(history) if isinstance(r, dict) and r.get("type", "valid") == "valid"
                and r.get("step") == step), None) if isinstance(history, list) else None
    summary = {"step": step, "max_steps": training.get("max_steps"), "elapsed_s": training.get("elapsed"),
               "best_dev_bleu": training.get("best_bleu"), "dev": dev, "init": training.get("init")}
    return finite_json(summary)


def finite_json(value: Any) -> Any:
    """`value` with NaN and infinities replaced by None (JSON has no such numbers)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value if value is None or isinstance(value, (str, int, bool)) else str(value)


def load_model(path: str | Path, device: torch.device | str = "cpu") -> LoadedModel:
    """Rebuild the model and vocabularies of a checkpoint, in eval mode, on `device`.

    The training state (optimizer moments, RNG, counters) is dropped as soon as the file is read (but
    for its `training_summary`), and the payload's weights once they are in the model, so that a loaded
    model holds its weights once. A folder is a model folder (`interlingua.modules.model_folder`),
    read without unpickling anything."""
    if Path(path).is_dir():
        from interlingua.modules.model_folder import load_folder  # it builds on this module
        return load_folder(path, device)
    payload = read_checkpoint(path)
    training = payload.pop("training", None)
    step = training.get("step") if isinstance(training, dict) else None
    summary = training_summary(training)
    del training
    try:
        cfg = stored_config(payload, path)
        vocabs = checkpoint_vocabs(payload)
        model = TranslationModel(cfg.model, {lang: len(v) for lang, v in vocabs.items()},
                                 payload["encoder_langs"], payload["decoder_langs"])
        model.load_state_dict(payload.pop("model"))
        restrict_to_vocabs(model, vocabs)
    except (KeyError, RuntimeError, TypeError, ValueError) as err:
        detail = " ".join(str(err).split())[:300]  # load_state_dict's first line names no tensor
        raise CheckpointError(f"{path} does not match its own config (corrupt checkpoint?): {detail}") from None
    model.to(device).eval()
    return LoadedModel(model, vocabs, cfg, [tuple(d) for d in payload["directions"]], payload, Path(path),
                       int(step) if isinstance(step, int) else None, summary)


_SAME_RUN = ("format", "version", "vocabs", "vocab_offsets", "encoder_langs", "decoder_langs", "directions")
_SAME_CONFIG = ("model", "directions", "preprocess")


def average_checkpoints(paths: list[str | Path], out: str | Path) -> Path:
    """Average the weights of checkpoints of one run (same model, directions, preprocessing and
    vocabularies) into a translation-only checkpoint at `out` (no training state); returns `out`.

    Floating-point tensors are averaged in float64 and stored in their own dtype; tensors that
    share storage in the first checkpoint (tied embeddings) share it in the average too."""
    paths = [Path(p) for p in paths]
    if not paths:
        raise CheckpointError("average needs at least one checkpoint")
    first = read_checkpoint(paths[0])
    first.pop("training", None)
    cfg = stored_config(first, paths[0]).model_dump(mode="json")
    ref = first.pop("model")
    sums: dict[str, torch.Tensor] = {k: v.double() if v.is_floating_point() else v for k, v in ref.items()}
    for path in paths[1:]:
        payload = read_checkpoint(path)
        other = stored_config(payload, path).model_dump(mode="json")
        differs = ([f"config section '{s}'" for s in _SAME_CONFIG if other[s] != cfg[s]]
                   + [f"'{k}'" for k in _SAME_RUN if payload.get(k) != first.get(k)])
        weights = payload["model"]
        if not differs and weights.keys() != ref.keys():
            differs = ["the weights' names"]
        if not differs:
            differs = [f"the shape of '{k}'" for k, v in weights.items() if v.shape != ref[k].shape][:1]
        if differs:
            raise CheckpointError(f"cannot average {path} with {paths[0]}: {differs[0]} differs "
                                  f"(only checkpoints of the same run can be averaged)")
        for k, v in weights.items():
            if v.is_floating_point():
                sums[k] += v.double()
        del payload, weights
    averaged: dict[str, torch.Tensor] = {}
    shared: dict[tuple[int, int, tuple[int, ...], tuple[int, ...]], torch.Tensor] = {}
    for k, v in ref.items():
        if not v.is_floating_point():
            averaged[k] = v
            continue
        key = (v.untyped_storage().data_ptr(), v.storage_offset(), tuple(v.shape), tuple(v.stride()))
        if key not in shared:
            shared[key] = (sums[k] / len(paths)).to(v.dtype)
        averaged[k] = shared[key]
    out = Path(out)
    save_atomic({**first, "model": averaged, "averaged_from": [str(p) for p in paths]}, out)
    return out
