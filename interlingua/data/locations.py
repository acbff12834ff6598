"""Where data sets live by default: `$INTERLINGUA_DATA`, else `./data`. One definition, so that what
`interlingua data NAME` writes is where `evaluate` and the demo look for it."""
from __future__ import annotations

import os
from pathlib import Path

DATA_ENV = "INTERLINGUA_DATA"


def data_root() -> Path:
    """The default folder of the data sets: the environment variable `INTERLINGUA_DATA` where set, else
    `data` in the current folder."""
    return Path(os.environ.get(DATA_ENV) or "data")
