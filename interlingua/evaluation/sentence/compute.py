"""Thread settings for the many small fits of the suite.

Small dense fits (scikit-learn / BLAS, the torch MLP probe) gain little from a second thread
and lose much when the threads outnumber the free cores, which the encoding and the other fit
workers share, so fits pin themselves to one thread and give the setting back afterwards;
encoding by the model is left alone.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from threadpoolctl import threadpool_limits

from interlingua.runtime import torch_threads


@contextmanager
def single_thread() -> Iterator[None]:
    """One BLAS thread and one torch intra-op thread inside the block."""
    with torch_threads(1), threadpool_limits(limits=1, user_api="blas"):
        yield
