"""`load_model`: the one place that tells a `.pt` checkpoint from a model folder and hands it to its reader.

Each reader (`checkpoint.load_checkpoint`, `folder.load_folder`) knows one kind of file; whoever takes
either kind (`interlingua.load`, the exports, `interlingua extend`) comes through here.
"""
from __future__ import annotations

from pathlib import Path

import torch

from interlingua.model_files.checkpoint import load_checkpoint
from interlingua.model_files.folder import load_folder
from interlingua.model_files.loaded import LoadedModel


def load_model(path: str | Path, device: torch.device | str = "cpu") -> LoadedModel:
    """The model of a checkpoint file or of a model folder (read without unpickling anything), in eval
    mode on `device`."""
    if Path(path).is_dir():
        return load_folder(path, device)
    return load_checkpoint(path, device)


def beside_model(model_path: str | Path, suffix: str) -> Path:
    """A file or folder kept beside a model (its CTranslate2 export, its int8 check): `<file stem or folder
    name><suffix>` in the folder the model is in."""
    path = Path(model_path)
    name = path.stem if path.is_file() else path.name
    return path.parent / f"{name}{suffix}"
