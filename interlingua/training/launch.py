"""`interlingua train --processes N`: N training processes on this machine, started through torch's own
launcher (what `torchrun --standalone --nproc-per-node N` does), so that a process that dies is one line
naming it, not the launcher's traceback, and the others stop cleanly (process 0 saves `last.pt`)."""
from __future__ import annotations

import logging
import os
import signal
import sys
import tempfile
import uuid

from interlingua.errors import TrainingError

LAUNCHER_LOGGERS = ("torch.distributed.elastic", "torch.distributed.launcher")
"""torch's launcher logs each failure itself (with its own traceback hint); the error raised here says it once."""


def _how_it_ended(exitcode: int) -> str:
    if exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


def launch_processes(arguments: list[str], processes: int) -> None:
    """Run `interlingua <arguments>` in `processes` processes joined in one process group (gloo on CPUs,
    nccl on GPUs); return when all have finished, or raise `TrainingError` naming the process that
    failed first and how."""
    from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs, SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    if "LOCAL_RANK" in os.environ:
        raise TrainingError("--processes starts its own processes: under torchrun, leave it out")
    for name in LAUNCHER_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    # the launcher's per-process files (error.json) in a folder removed afterwards: left to torch, a
    # /tmp/torchelastic_* folder stays behind after every launch
    with tempfile.TemporaryDirectory(prefix="interlingua-launch-") as logs:
        config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=processes, run_id=str(uuid.uuid4()),
                              rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0,
                              logs_specs=DefaultLogsSpecs(log_dir=logs))
        try:
            elastic_launch(config, sys.executable)("-m", "interlingua.cli", *arguments)
        except SignalException as err:  # Ctrl-C or SIGTERM to the launcher: the processes got it too and saved
            raise KeyboardInterrupt(f"{signal.Signals(err.sigval).name} to the launcher") from None
        except ChildFailedError as err:
            rank, first = err.get_first_failure()
            raise TrainingError(
                f"training process {rank} of {processes} {_how_it_ended(first.exitcode)}; the others were "
                f"stopped (process 0 saves last.pt when it can): continue with --resume") from None
