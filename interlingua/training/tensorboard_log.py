"""TensorBoard event files beside metrics.jsonl (`train.tensorboard: true`), in `<work_dir>/tensorboard/`.

The scalars are metrics.jsonl's records: per log step the training loss, penalty, agreement loss
(where it is on), learning rate and tokens/s; per validation the dev BLEU of each direction and
the mean BLEU and loss of the trained ones. Process 0 alone writes them, as it writes metrics.jsonl.

Resumed at step T, the writer purges what an earlier session logged from T on (TensorBoard's
`purge_step`: events after the checkpoint are hidden, however far the stopped session got), then
writes again the records of step T that metrics.jsonl keeps (the resumed state does not redo
them), so every step is shown once. A run that turns TensorBoard on when resumed gets its earlier
records from metrics.jsonl.
"""
from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interlingua.errors import ConfigError
from interlingua.records import Validation, is_validation

if TYPE_CHECKING:
    from interlingua.training.metrics import MetricsLog

FOLDER = "tensorboard"
TRAIN_SCALARS = ("loss", "penalty", "agreement", "lr", "tokens_per_s")
"""The keys of a train record written as `train/<key>`."""


def require_tensorboard() -> None:
    """Refuse `train.tensorboard: true` before training when the package is missing (it is an extra)."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError:
        raise ConfigError("train.tensorboard: true needs the tensorboard package: "
                          'pip install "interlingua[tensorboard]" (or set train.tensorboard: false)') from None


def _check_writable(folder: Path) -> None:
    """Refuse a folder the event files cannot be written into, naming it, before the writer starts: its
    own thread would fail in the background and print that thread's traceback before the error."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise OSError(err.errno, f"cannot write TensorBoard's event files into it ({err.strerror}; "
                                 f"train.tensorboard: true)", str(folder)) from None


class TensorBoardLog:
    """The run's event files; `write` takes metrics.jsonl records."""

    def __init__(self, work_dir: Path, step: int, metrics: MetricsLog):
        """Open the writer for a run at `step` (0: a fresh run), whose metrics.jsonl is already
        trimmed to that state."""
        from torch.utils.tensorboard import SummaryWriter
        self.folder = Path(work_dir) / FOLDER
        earlier = sorted(self.folder.glob("events.out.tfevents.*")) if self.folder.is_dir() else []
        if step == 0:  # a fresh run: events of one stopped before its first checkpoint are stale
            for path in earlier:
                path.unlink()
            earlier = []
        _wait_for_a_later_second(earlier)
        _check_writable(self.folder)
        self.writer = SummaryWriter(str(self.folder), purge_step=step if earlier else None)
        for record in metrics.records():
            if record["step"] == step or not earlier and record["step"] < step:
                self.write(record)

    def write(self, record: dict[str, Any]) -> None:
        """The scalars of one metrics.jsonl record (null and non-finite values are left out)."""
        if is_validation(record):
            v = Validation.from_json(record)
            self._scalar("dev/mean_bleu", v.mean_bleu, v.step)
            self._scalar("dev/mean_loss", v.mean_loss, v.step)
            for name, scores in v.directions.items():
                self._scalar(f"dev/bleu/{name}", scores.bleu, v.step)
        elif record.get("type") == "train":
            step = int(record["step"])
            for key in TRAIN_SCALARS:
                self._scalar(f"train/{key}", record.get(key), step)

    def _scalar(self, tag: str, value: Any, step: int) -> None:
        if isinstance(value, (int, float)) and math.isfinite(value):
            self.writer.add_scalar(tag, float(value), step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def _wait_for_a_later_second(earlier: list[Path]) -> None:
    """TensorBoard reads a folder's event files in name order, and a name starts with the second its
    writer was made in (then host, pid, a counter): a new file must start in a later second than
    the earlier files for its purge to come after them (a wait only for a session resumed at once)."""
    seconds = [int(parts[3]) for p in earlier if len(parts := p.name.split(".")) > 3 and parts[3].isdigit()]
    while seconds and time.time() < max(seconds) + 1:
        time.sleep(0.05)
