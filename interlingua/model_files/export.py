"""`interlingua export folder|ctranslate2 MODEL OUT`: a checkpoint or model folder written in another form.

OUT is checked before the model is read (reading a large one takes a while), then written whole.
"""
from __future__ import annotations

from pathlib import Path

from interlingua.model_files import ctranslate2_export, folder
from interlingua.model_files.load import load_model


def export_folder(checkpoint: str | Path, out: str | Path) -> Path:
    """The checkpoint (or model folder) `checkpoint` written as a model folder at `out` (`folder`); returns `out`."""
    out = Path(out)
    folder.check_target(out)
    return folder.write_folder(load_model(checkpoint, "cpu"), out)


def export_ctranslate2(checkpoint: str | Path, out: str | Path, quantization: str | None = None) -> Path:
    """The checkpoint (or model folder) `checkpoint` written as a CTranslate2 model folder at `out`
    (`ctranslate2_export`); returns `out`."""
    out = Path(out)
    ctranslate2_export.check_quantization(quantization)
    ctranslate2_export.require_ctranslate2()
    ctranslate2_export.check_target(out)
    return ctranslate2_export.write_ctranslate2(load_model(checkpoint, "cpu"), out, quantization)
