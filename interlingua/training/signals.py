"""Ctrl-C and SIGTERM during training: the loop stops at once, except inside a weight update, which
is finished first so that the step is whole (the trainer then saves `last.pt` at a step boundary)."""
from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType, TracebackType
from typing import Any


class TrainingInterrupted(KeyboardInterrupt):
    """Training was stopped by Ctrl-C or SIGTERM; `last.pt` holds the state to resume from."""

    def __init__(self, message: str, signum: int = signal.SIGINT):
        super().__init__(message)
        self.signum = int(signum)


class StopSignals:
    """Within `with`: SIGINT and SIGTERM raise `TrainingInterrupted` where the loop is, or, inside
    `updating()`, as soon as it ends. Handlers are installed only from the main thread (Python's
    rule) and the previous ones are put back on exit."""

    def __init__(self) -> None:
        self.updating = False
        """True while the weights are being changed (an interrupt raised there leaves them unknown)."""
        self._deferred: int | None = None
        self._holding = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, err: BaseException | None,
                 tb: TracebackType | None) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    @contextmanager
    def updating_weights(self) -> Iterator[None]:
        """A signal that arrives in here waits until the block is done (but an exception leaves
        `updating` set, so the caller knows the update may be half done)."""
        self.updating = True
        yield
        self.updating = False
        if self._deferred is not None:
            signum, self._deferred = self._deferred, None
            raise TrainingInterrupted(signal.Signals(signum).name, signum)

    @contextmanager
    def held(self) -> Iterator[None]:
        """A signal that arrives in here is dropped: the run is already stopping and saving last.pt (a
        second SIGTERM, e.g. the launcher's after a process died, must not cut that save short)."""
        self._holding = True
        try:
            yield
        finally:
            self._holding = False

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self._holding:
            return
        if self.updating:  # let the weight update finish: the step is then whole
            self._deferred = signum
            return
        raise TrainingInterrupted(signal.Signals(signum).name, signum)
