"""The toolkit's own exceptions: the CLI prints their message alone, no traceback."""


class InterlinguaError(Exception):
    """Bad input a user can fix (files, configs, languages, checkpoints)."""


class ConfigError(InterlinguaError):
    """A config key is unknown or has an invalid value."""


class DataError(InterlinguaError):
    """A corpus file is missing, unreadable or misaligned."""


class CheckpointError(InterlinguaError):
    """A checkpoint is missing, truncated or not an interlingua checkpoint."""


class LanguageError(InterlinguaError):
    """A language the model or corpus does not know was asked for."""


class TargetMismatchError(LanguageError):
    """A representation asked to be written in another target than the one it was encoded for (a model
    that puts the target's tag before the source encodes each text once per target)."""


class TrainingError(InterlinguaError):
    """A training run stopped by a fault of its own (not of its config or data): a process of a
    several-process run died, or the loss diverged."""


class TrainingDiverged(TrainingError):
    """The training loss stayed non-finite for `train.max_nonfinite_steps` steps in a row; the run's last
    checkpoints (written before, from finite weights) are kept."""


class ArgumentError(InterlinguaError, ValueError):
    """An argument of the Python API or the command line is out of its range or not one of its choices
    (`interlingua.arguments`: the one definition of those bounds)."""


class ArgumentTypeError(ArgumentError, TypeError):
    """An argument of the Python API is of the wrong type (a float for a whole number, None for a language)."""


class RecordError(InterlinguaError, ValueError):
    """A record of a run's dev validations (a metrics.jsonl line, an entry of a checkpoint's training history)
    is malformed."""


def one_line(err: BaseException, limit: int = 300) -> str:
    """`err`'s message on one line, cut at `limit` characters, for quoting inside one of the toolkit's own
    messages (libraries' messages run over several lines; some carry none, then its type names it)."""
    return " ".join(str(err).split())[:limit] or type(err).__name__
