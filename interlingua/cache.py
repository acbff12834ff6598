"""The user's cache folder: what is slow to work out and the same every time on this machine (the precision
probe's timings, langid's unpacked model). `$INTERLINGUA_CACHE_DIR`, else ~/.cache/interlingua; anything in
it may be deleted at any time and is made again."""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The cache folder (not created here: writers create it, and a failed write is never an error)."""
    return Path(os.environ.get("INTERLINGUA_CACHE_DIR") or Path.home() / ".cache" / "interlingua")
