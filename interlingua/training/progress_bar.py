"""The training progress bar (rank 0's): steps, or seconds of training with a wall-clock budget."""
from __future__ import annotations

from types import TracebackType
from typing import Any

from tqdm import tqdm

from interlingua.config import TrainConfig


class ProgressBar:
    def __init__(self, tc: TrainConfig, max_steps: int, step: int, elapsed: float, enabled: bool):
        self.by_time = tc.max_minutes is not None
        """With `train.max_minutes` the bar counts seconds of training, otherwise steps."""
        self._bar = tqdm(total=round(tc.max_minutes * 60) if tc.max_minutes is not None else max_steps,
                         initial=round(elapsed) if self.by_time else step,
                         desc="train", unit="s" if self.by_time else "step", dynamic_ncols=True, mininterval=2,
                         disable=not enabled)

    def advance(self, elapsed: float) -> None:
        """One more step, which brought the training time to `elapsed` seconds."""
        if self.by_time:
            self._bar.update(max(0, min(round(elapsed), self._bar.total) - self._bar.n))
        else:
            self._bar.update(1)

    def show(self, record: dict[str, Any]) -> None:
        """The figures of a train log line beside the bar."""
        self._bar.set_postfix(step=record["step"], loss=f"{record['loss']:.3f}", pen=f"{record['penalty']:.2f}",
                              **({"agr": f"{record['agreement']:.3f}"} if "agreement" in record else {}),
                              tok_s=f"{record['tokens_per_s']:.0f}")

    @staticmethod
    def write(line: str) -> None:
        """A line above the bar."""
        tqdm.write(line)

    def close(self) -> None:
        self._bar.close()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, err: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
