"""Every evaluation the command line runs, declared once: its name, its options and the function that
runs it, which returns a `Report`.

`interlingua evaluate` and `interlingua analyze` are built from `EVALUATIONS`: their choices, their
options (the union of their entries' options) and their dispatch. An entry names its function as
"module:function", so that building the parser imports no model code, and every option's `dest` is a
keyword parameter of that function (but the process-wide --threads, which the command line applies),
so an option an entry declares always reaches it (tests/test_evaluation_registry.py checks every entry
against its function's signature).

Adding an evaluation: a module with a function `report_<name>(...) -> Report` whose keyword parameters
are the options' dests, and one `EVALUATIONS.register(Evaluation(...))` line below.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from interlingua.data.locations import data_root
from interlingua.errors import InterlinguaError

Command = Literal["evaluate", "analyze"]
ValueKind = Literal["text", "count", "whole", "beam", "switch"]
"""How the command line reads an option's value: text as given, count (a whole number >= 1), whole (a whole
number >= 0), beam (a beam size, 1 to the search's maximum), switch (a flag that is there or not)."""


@dataclass(frozen=True)
class Option:
    """One command-line option of one or more evaluations, with argparse's settings in plain terms."""

    flag: str
    """"--max-sentences"; a name without dashes is a positional argument."""
    help: str = ""
    value: ValueKind = "text"
    default: Any = None
    choices: tuple[str, ...] | None = None
    nargs: str | None = None
    metavar: str | None = None
    repeat: bool = False
    """The option may be given several times; the values form a list."""
    required: bool = False
    aliases: tuple[str, ...] = ()
    """Short forms, e.g. "-i" for "--input"."""
    shared: bool = False
    """The program-wide option of this flag (--device, --precision), which the CLI declares the same way
    for every command, so its help and choices live in one place."""
    process_wide: bool = False
    """A setting of the whole process (torch threads) that the command line applies before the run,
    not an argument of the entry's function."""

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


@dataclass
class Report:
    """What every evaluation returns: its markdown, the JSON it wrote, the files it wrote, lines to
    print after those (timings), and its result object for callers that want the numbers typed."""

    markdown: str
    data: dict[str, Any]
    files: list[Path]
    notes: list[str] = field(default_factory=list)
    result: Any = None


@dataclass(frozen=True)
class Evaluation:
    """One entry of `EVALUATIONS`: `run(**values)` calls `function` with the values of `options`
    (keyed by dest) and with `bound` (fixed arguments, e.g. which sentence suite)."""

    name: str
    command: Command
    help: str
    function: str
    """"module:function", imported only when the entry runs."""
    options: tuple[Option, ...]
    bound: Mapping[str, Any] = field(default_factory=dict)

    def target(self) -> Callable[..., Report]:
        module, _, name = self.function.partition(":")
        return getattr(importlib.import_module(module), name)

    @property
    def arguments(self) -> tuple[Option, ...]:
        """The options passed to `function` (all but the process-wide ones)."""
        return tuple(o for o in self.options if not o.process_wide)

    def run(self, **values: Any) -> Report:
        """Run with `values` (dest -> value) of this entry's arguments; other keys are refused."""
        unknown = sorted(set(values) - {o.dest for o in self.arguments})
        if unknown:
            raise InterlinguaError(f"evaluation '{self.name}' takes no option {', '.join(unknown)}")
        return self.target()(**self.bound, **values)


def named_checkpoints(specs: list[str] | None, what: str, checkpoint: str | None = None) -> dict[str, Path]:
    """`--model NAME=CKPT` or `--model CKPT` (named after its run folder, or its file), repeated, after the positional
    `checkpoint` where one is given -> {name: checkpoint}; `what` names the analysis in the error when there are
    none. Names are the tables' and plots' labels: two alike are refused."""
    specs = ([checkpoint] if checkpoint else []) + list(specs or [])
    if not specs:
        raise InterlinguaError(f"analyze {what} needs a model: interlingua analyze {what} CKPT, or --model "
                               "[NAME=]CKPT")
    out: dict[str, Path] = {}
    for spec in specs:
        name, _, path = spec.rpartition("=")
        name = name or Path(path).parent.name or Path(path).stem
        if name in out:  # two checkpoints of one run, or one name given twice: one would hide the other
            raise InterlinguaError(f"two models named '{name}' ({out[name]} and {path}): name each one with "
                                   "--model NAME=CKPT")
        out[name] = Path(path)
    return out


class Evaluations(Mapping[str, Evaluation]):
    """Entries by name (one namespace for both commands); one flag means one option within a command."""

    def __init__(self) -> None:
        self._entries: dict[str, Evaluation] = {}

    def register(self, entry: Evaluation) -> Evaluation:
        if entry.name in self._entries:
            raise InterlinguaError(f"evaluation '{entry.name}' is registered twice")
        for option in entry.options:
            other = next((o for o in self.options(entry.command) if o.flag == option.flag), None)
            if other is not None and other != option:
                raise InterlinguaError(f"option {option.flag} of `{entry.command} {entry.name}` differs from the one "
                                       "other entries of that command declare: declare it once and share it")
        self._entries[entry.name] = entry
        return entry

    def __getitem__(self, name: str) -> Evaluation:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def of(self, command: str) -> dict[str, Evaluation]:
        """The entries of one command, in registration order."""
        return {name: e for name, e in self._entries.items() if e.command == command}

    def options(self, command: str) -> list[Option]:
        """Every option of a command's entries, each once, in the order first declared."""
        out: dict[str, Option] = {}
        for entry in self.of(command).values():
            for option in entry.options:
                out.setdefault(option.flag, option)
        return list(out.values())

    def takers(self, command: str, option: Option) -> list[str]:
        """The entries of `command` that take `option`."""
        return [name for name, e in self.of(command).items() if option in e.options]


EVALUATIONS = Evaluations()

# --- options of `interlingua evaluate` ----------------------------------------------------------------

MODEL = Option("--model", required=True)
SPLIT = Option("--split", default="test_2016_flickr")
CORPUS = Option("--corpus", help="corpus YAML (default: the one the model was trained on)")
BEAM = Option("--beam", value="beam", default=1)
PIVOT = Option("--pivot", help="translate through this language (directions from or into it: directly); "
               "crosslingual: the zero-shot directions' pivot where both legs were trained (default en; "
               "else the model's own choice)")
BATCH_SIZE = Option("--batch-size", value="count", default=64)
NO_REPEAT_NGRAM = Option("--no-repeat-ngram", value="whole", default=0, metavar="N",
                         help="no N-gram of subwords twice in an output (Model.translate's no_repeat_ngram; 0: off)")
MAX_SENTENCES = Option("--max-sentences", value="count", metavar="N", help="the first N lines of the split")
NO_BLEU = Option("--no-bleu", value="switch", help="no translation (vectors only, fast)")
THREADS = Option("--threads", value="count", process_wide=True,
                 help="torch threads for the whole command (default: torch's)")
DATA_ROOT = Option("--data-root", default=str(data_root()),
                   help="folder with senteval_downstream/, xnli/, multi30k/, webis_cls10/ "
                        "(cldc: or the Webis-CLS-10 folder itself; default: $INTERLINGUA_DATA, else ./data, "
                        "where `interlingua data NAME` puts them)")
PROBING_DIR = Option("--probing-dir", metavar="DIR",
                     help="official SentEval probing files (default: <data-root>/senteval_probing)")
JOBS = Option("--jobs", value="count", metavar="N",
              help="worker processes for the probe fits of a sentence suite (default: one per usable core)")
QUICK = Option("--quick", value="switch", help="subsample data sets and stop probes after 6 dev checks (smoke runs)")
NO_REFERENCES = Option("--no-references", value="switch",
                       help="skip the bag-of-words and untrained reference points")
OUT = Option("--out", help="output folder (default: <model folder>/eval; cldc: <model folder>/eval/cldc)")
PAIRS = Option("--pairs", nargs="+", default=["en-de", "en-fr"], metavar="A-B",
               help="language pairs, each classified both ways (default: en-de en-fr)")
DOMAINS = Option("--domains", nargs="+", choices=("books", "dvd", "music"),
                 help="Webis-CLS-10 domains (default: all three)")
TRANSLATOR = Option("--translator", metavar="CKPT",
                    help="the model that translates (other-side vectors, translate-test); default: --model. "
                         "For an NTDV model, its frozen base model, as paper 003 does")
DOCUMENT_FILES = tuple(
    option for part in ("train", "test") for option in (
        Option(f"--{part}-docs", metavar="FILE", help=f"cldc on your own data: {part} documents, one a line "
                                                      f"(with --{part}-labels, --{part}-lang)"),
        Option(f"--{part}-labels", metavar="FILE", help="one label a line, any names"),
        Option(f"--{part}-lang", metavar="LANG")))
MAX_DOCUMENTS = Option("--max-documents", value="count", metavar="N",
                       help="at most N training and N test documents per language and domain (quick runs)")
DEVICE = Option("--device", shared=True)
PRECISION = Option("--precision", shared=True)

TRANSLATING = (MODEL, SPLIT, CORPUS, BEAM, PIVOT, BATCH_SIZE, MAX_SENTENCES, NO_REPEAT_NGRAM)
SENTENCE_SUITE = (MODEL, DATA_ROOT, PROBING_DIR, JOBS, QUICK, NO_REFERENCES, OUT, DEVICE, PRECISION)

EVALUATIONS.register(Evaluation(
    "bleu", "evaluate", "BLEU / chrF / off-target matrix of every direction",
    "interlingua.evaluation.bleu_report:report_bleu", (*TRANSLATING, THREADS, OUT, DEVICE, PRECISION)))
SENTENCE_SUITES = {
    "downstream": "SentEval classification tasks", "similarity": "STS, STS-B, SICK-R",
    "nli": "SICK-E, XNLI-en", "probing": "SentEval probing tasks (official files or built locally)",
    "xnli": "XNLI transfer", "retrieval": "translation retrieval", "all": "every sentence suite"}
"""The sentence-vector suites (`interlingua.evaluation.sentence.SUITES`, a test keeps the two equal)."""
for _suite, _help in SENTENCE_SUITES.items():
    EVALUATIONS.register(Evaluation(_suite, "evaluate", f"sentence vectors: {_help}",
                                    "interlingua.evaluation.vectors:report_suite", SENTENCE_SUITE, {"suite": _suite}))
EVALUATIONS.register(Evaluation(
    "cldc", "evaluate", "cross-lingual document classification (Webis-CLS-10, or your own documents)",
    "interlingua.evaluation.cldc:report_cldc",
    (MODEL, THREADS, DATA_ROOT, OUT, PAIRS, DOMAINS, TRANSLATOR, *DOCUMENT_FILES, MAX_DOCUMENTS, DEVICE, PRECISION)))
EVALUATIONS.register(Evaluation(
    "crosslingual", "evaluate", "how language-agnostic the model is (retrieval, margin, language probe, "
    "supervised / zero-shot / pivot BLEU, off-target)",
    "interlingua.evaluation.crosslingual_report:report_crosslingual",
    (*TRANSLATING, NO_BLEU, THREADS, OUT, DEVICE, PRECISION)))

# --- options of `interlingua analyze` -----------------------------------------------------------------

CHECKPOINT = Option("checkpoint", nargs="?", help="the model to analyse (a .pt checkpoint or a model folder; the same "
                                                  "as one --model)")
MODELS = Option("--model", repeat=True, metavar="[NAME=]CKPT", help="the model to analyse; repeat to compare models")
TRAIN_SPLIT = Option("--train-split", default="val", help="split the probes are trained on")
MAX_SPLIT_SENTENCES = Option("--max-sentences", value="count", help="at most N sentences per split")
LANGUAGES = Option("--languages", nargs="+", help="source languages (default: all the model's)")
LANG = Option("--lang", default="en", help="language of the sentences")
SRC = Option("--src", default="en", help="source language")
TGT = Option("--tgt", default="de", help="target language")
ANALYSIS_CORPUS = Option("--corpus", help="corpus YAML (default: the first model's)")
INPUT = Option("--input", aliases=("-i",), help="sentences from this file instead of the corpus split")
SENTENCE = Option("--sentence", help="the sentence to draw (default: the first one)")
SVCCA_K = Option("--svcca-k", value="count", metavar="K",
                 help="directions fixed-k SVCCA keeps in every layer (default 32, fewer where the states have fewer)")
ANALYSIS_OUT = Option("--out", help="output folder (default: <first model folder>/analysis; encoder: <checkpoint "
                                     "folder>/analysis)")

EVALUATIONS.register(Evaluation(
    "heads", "analyze", "bridge head entropy and heat maps (penalty study)",
    "interlingua.evaluation.penalty_analysis:report_heads",
    (CHECKPOINT, MODELS, LANG, SPLIT, ANALYSIS_CORPUS, INPUT, SENTENCE, ANALYSIS_OUT, DEVICE)))
EVALUATIONS.register(Evaluation(
    "lengths", "analyze", "BLEU by source length",
    "interlingua.evaluation.length_analysis:report_lengths",
    (CHECKPOINT, MODELS, SRC, TGT, SPLIT, ANALYSIS_CORPUS, BEAM, ANALYSIS_OUT, DEVICE)))
EVALUATIONS.register(Evaluation(
    "encoder", "analyze", "per-layer encoder probes, SVCCA and CKA between languages, language ID and retrieval",
    "interlingua.evaluation.encoder_analysis:report_encoder",
    (CHECKPOINT, MODELS, TRAIN_SPLIT, MAX_SPLIT_SENTENCES, LANGUAGES, SPLIT, ANALYSIS_CORPUS, SVCCA_K,
     ANALYSIS_OUT, DEVICE)))
