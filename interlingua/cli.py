"""The `interlingua` command. It only parses arguments and calls library functions.

Around them it does the little a command needs: torch's thread count for `--threads` (of a command
that runs no trainer), corpora built from the files it was given, label files read for `evaluate cldc`, and
one line on stderr however it ends (an error, Ctrl-C or SIGTERM), never a traceback."""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from interlingua import arguments
from interlingua.allocator import tune_allocator
from interlingua.errors import InterlinguaError
from interlingua.textio import check_input_path, check_standard_output, read_input_lines

log = logging.getLogger("interlingua")


EXPORT_QUANTIZATIONS = ("none", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16",
                        "bfloat16", "float32")
"""`export ctranslate2 --quantization`: none, or a weight type CTranslate2's converter takes."""


# The argparse types: each a bound of `interlingua.arguments`, which the Python API checks its arguments with.

def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1 (batch sizes, counts)."""
    return int(arguments.COUNT.parse(text))


def beam_size(text: str) -> int:
    """argparse type: a beam size, 1 (greedy search) to `MAX_BEAM`."""
    return int(arguments.BEAM.parse(text))


def output_length(text: str) -> int:
    """argparse type: the most output subwords of a sentence, 1 to `MAX_OUTPUT_LEN`."""
    return int(arguments.MAX_LEN.parse(text))


def non_negative_int(text: str) -> int:
    """argparse type: a whole number >= 0 (seeds)."""
    return int(arguments.NON_NEGATIVE_INT.parse(text))


def non_negative_float(text: str) -> float:
    """argparse type: a finite number >= 0 (length penalty)."""
    return arguments.NON_NEGATIVE.parse(text)


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (time budgets)."""
    return arguments.POSITIVE.parse(text)


def _use_threads(threads: int | None) -> None:
    """`--threads N`: torch's thread count for the rest of the command (default: torch's own)."""
    if threads:
        import torch
        torch.set_num_threads(threads)


DATA_FOLDERS = {"multi30k": "multi30k", "europarl": "europarl", "iwslt17": "iwslt17",
                "senteval": "senteval_downstream", "xnli": "xnli", "senteval-probing": "senteval_probing",
                "webis-cls10": "webis_cls10", "webis-monolingual": "webis_monolingual"}
"""`interlingua data NAME`'s folder under the data root when --dest is not given: where `evaluate
--data-root` and the demo look for it."""


def cmd_data(args: argparse.Namespace) -> None:
    if args.dest is None:
        from interlingua.data.locations import data_root
        args.dest = str(data_root() / DATA_FOLDERS[args.dataset])
    if args.dataset == "multi30k":
        from interlingua.data.download import get_multi30k
        path = get_multi30k(args.dest, args.source)
        print(f"multi30k ready: {path}")
    elif args.dataset == "senteval":
        from interlingua.data.evaluation_sets import get_senteval_downstream
        print(f"SentEval downstream tasks ready in {get_senteval_downstream(args.dest, args.source)}")
    elif args.dataset == "xnli":
        from interlingua.data.evaluation_sets import get_xnli_dev
        print(f"XNLI dev (en, de, fr, es) ready in {get_xnli_dev(args.dest, args.source)}")
    elif args.dataset == "webis-cls10":
        from interlingua.data.webis import get_webis_cls10
        path, with_test = get_webis_cls10(args.dest, args.source)
        if with_test:
            print(f"Webis-CLS-10 (en de fr x books dvd music, official train and test parts) ready in {path}")
        else:
            print(f"Webis-CLS-10 training parts (en de fr x books dvd music) ready in {path}; {args.source} has no "
                  "test.review parts, so `evaluate cldc` holds out half of each train.review as the test split")
    elif args.dataset == "webis-monolingual":
        _webis_monolingual(args)
    elif args.dataset == "europarl":
        from interlingua.data.europarl import get_europarl
        print(f"Europarl v7 ready: {get_europarl(args.dest, args.langs, args.source)}")
    elif args.dataset == "iwslt17":
        from interlingua.data.iwslt import get_iwslt17
        print(f"IWSLT 2017 multilingual ready: {get_iwslt17(args.dest, args.langs, args.source)}")
    else:
        if args.source is not None:
            raise InterlinguaError("senteval-probing downloads only; copy local probing files into the folder "
                                   "given to `evaluate --probing-dir` instead of using --from")
        from interlingua.data.senteval_download import download_senteval_probing
        files = download_senteval_probing(Path(args.dest))
        print(f"{len(files)} SentEval probing files in {args.dest}")


def _webis_monolingual(args: argparse.Namespace) -> None:
    """Review sentences of the Webis-CLS-10 training splits as monolingual text beside a corpus."""
    from interlingua.data.corpus import load_corpus, write_corpus_with_monolingual
    from interlingua.data.webis import LANGUAGES, review_sentences
    if args.source is None or args.corpus is None:
        raise InterlinguaError("webis-monolingual needs --from (the Webis-CLS-10 folder) and --corpus (the corpus "
                               "YAML to add the review text to)")
    corpus_langs = load_corpus(args.corpus).languages
    langs = args.langs or [x for x in LANGUAGES if x in corpus_langs]
    unknown = [x for x in langs if x not in LANGUAGES]
    if unknown:
        raise InterlinguaError(f"Webis-CLS-10 has no language {', '.join(unknown)} (it has {', '.join(LANGUAGES)})")
    text = {lang: review_sentences(Path(args.source), lang) for lang in langs}
    out = write_corpus_with_monolingual(args.corpus, Path(args.dest), "webis_reviews", text)
    counts = ", ".join(f"{lang} {len(lines)}" for lang, lines in text.items())
    print(f"review sentences of the training splits ({counts}) added to {args.corpus} as monolingual text: {out}")


def cmd_prepare(args: argparse.Namespace) -> None:
    from interlingua.config import load_config
    from interlingua.data.prepare import cleaning_summary, prepare
    from interlingua.training.work_dir_lock import WorkDirLock, remove_stale_temporaries
    cfg = load_config(args.config, args.set)
    with WorkDirLock(cfg.work_dir):  # the same lock as `train`: one process writes a work_dir at a time
        remove_stale_temporaries(cfg.work_dir)
        data = prepare(cfg, force=args.force)
    sizes = {lang: len(v) for lang, v in data.vocabs.items()}
    counts = {split: sum(len(g) for g in groups) for split, groups in data.splits.items()}
    print(f"prepared {cfg.work_dir / 'data'}: vocabularies {sizes}; lines per split {counts}")
    for line in cleaning_summary(data.cleaning):
        print(line)


def _add_engine(parser: argparse.ArgumentParser) -> None:
    """The one `--engine` option of the commands that translate with a trained model."""
    parser.add_argument("--engine", default="native", choices=arguments.ENGINES,
                        help="what translates: native (default); ctranslate2: CTranslate2 on the model's export, "
                             "cached beside it (shared Transformers without a bridge, on the CPU; greedy output "
                             "as native, beam search CTranslate2's); auto: ctranslate2 where that is possible and "
                             "measures faster here (cached), else native")


def _add_precision(parser: argparse.ArgumentParser) -> None:
    """The one `--precision` option of the commands that translate or embed with a trained model."""
    parser.add_argument("--precision", default="fp32", choices=arguments.PRECISIONS,
                        help="fp32 (default); bf16: autocast, faster on CPUs with AMX / AVX512-BF16 and on GPUs, "
                             "outputs may differ in places; fp16: CUDA GPUs; int8: CPUs, the big linear layers in "
                             "int8 (weights per channel, inputs per row) where an int8 kernel measures faster "
                             "than fp32 here (else refused), outputs may differ in places; auto: bf16 / "
                             "fp16 on a GPU, on a CPU bf16 only where timing this model's decoding measures it "
                             "faster (cached), then int8 only where `interlingua check-int8` recorded that it keeps "
                             "dev BLEU within 0.3 and it is faster still")


def _add_device(parser: argparse.ArgumentParser, overrides_config: bool = False) -> None:
    """The one `--device` option; for train/experiment it overrides the config's train.device."""
    parser.add_argument("--device", default=None if overrides_config else "auto",
                        help="where the model runs: auto (a GPU when available, else the CPU), cpu, cuda, cuda:N, mps"
                             + (" (default: the config's train.device, auto)"
                                if overrides_config else " (default: auto)"))


def _add_force(parser: argparse.ArgumentParser, flag: str) -> None:
    parser.add_argument("--force", action="store_true",
                        help=f"let {flag} replace one of the command's own inputs or a training checkpoint "
                             f"(one holding optimizer state; refused without it)")


def _device_override(args: argparse.Namespace) -> list[str]:
    return [*args.set, f"train.device={args.device}"] if args.device else list(args.set)


def cmd_train(args: argparse.Namespace) -> None:
    from interlingua.config import load_config
    from interlingua.training.trainer import train
    cfg = load_config(args.config, _device_override(args))
    if args.processes > 1:
        from interlingua.training.launch import launch_processes
        launch_processes(_train_arguments(args), args.processes)
        return
    result = train(cfg, resume=args.resume, init=args.init)
    if not result.main_process:  # under torchrun: rank 0 reports
        return
    best = "n/a" if result.best_bleu is None else f"{result.best_bleu:.2f}"
    print(f"trained {result.steps} steps; best dev mean BLEU {best}; "
          f"checkpoints: {result.best_checkpoint}, {result.last_checkpoint}")


def _train_arguments(args: argparse.Namespace) -> list[str]:
    """The `train` command line each process of `--processes` runs: this one without `--processes`."""
    out = ["train", args.config, *(x for value in args.set for x in ("--set", value))]
    out += ["--resume"] if args.resume else []
    out += ["--init", args.init] if args.init else []
    return out + (["--device", args.device] if args.device else [])


def cmd_extend(args: argparse.Namespace) -> None:
    from interlingua.training.extension import extend_checkpoint
    given = {k: v for k, v in (("vocab_size", args.vocab_size), ("noise", args.noise)) if v is not None}
    ext = extend_checkpoint(args.checkpoint, args.lang, args.out, corpus=args.corpus, seed=args.seed,
                            force=args.force, **given)
    own = f"; its own weights (the old languages' mean): {', '.join(ext.added)}" if ext.added else ""
    print(f"added '{ext.lang}' as ids {ext.old_size}-{ext.new_size - 1} ({ext.new_size - ext.old_size} new; grown: "
          f"{', '.join(ext.grown)}{own}); wrote {ext.out}; fine-tune with: interlingua train CONFIG --init {ext.out}")


def cmd_translate(args: argparse.Namespace) -> None:
    from interlingua.inference.api import load
    from interlingua.model_files.checkpoint import check_output
    if args.output:
        check_output(args.output, [args.model, args.input, args.shortlist], force=args.force, flag="-o")
    else:
        check_standard_output()
    _use_threads(args.threads)
    check_input_path(args.input)  # a wrong path fails before the model loads; stdin is read after it
    model = load(args.model, args.device, args.precision, args.engine)
    if args.shortlist:
        model.use_shortlist(args.shortlist)
    out = model.translate(read_input_lines(args.input), args.src, args.tgt, beam=args.beam, pivot=args.pivot,
                          length_penalty=args.length_penalty, max_len=args.max_len, batch_size=args.batch_size,
                          progress=True, beam_stop=args.beam_stop, workers=args.workers,
                          no_repeat_ngram=args.no_repeat_ngram)
    text = "".join(s + "\n" for s in out)
    if args.output:
        from interlingua.atomic_files import write_text_atomic
        write_text_atomic(args.output, text)
    else:
        sys.stdout.write(text)


def cmd_synthesize(args: argparse.Namespace) -> None:
    from interlingua.inference.api import load
    from interlingua.inference.synthesize import synthesize
    out = Path(args.out)
    if (out / "corpus.yaml").exists() and not args.force:
        raise InterlinguaError(f"{out} already holds a corpus (corpus.yaml); choose another --out or add --force")
    _use_threads(args.threads)
    model = load(args.model, args.device, args.precision)
    directions = [_direction(d) for d in args.directions] if args.directions else None
    made = synthesize(model, args.corpus or model.config.corpus, out, args.pivot, directions, beam=args.beam,
                      batch_size=args.batch_size, max_lines=args.max_lines)
    print(f"wrote {made.corpus}: " + ", ".join(f"{d} {n:,} synthetic pairs" for d, n in made.pairs.items())
          + f"; train on it with `corpus: {made.corpus}` (no real pair of two languages besides {args.pivot})")


def _direction(text: str) -> tuple[str, str]:
    parts = text.split("-")
    if len(parts) != 2 or not all(parts):
        raise InterlinguaError(f"direction '{text}': expected SRC-TGT, e.g. de-fr")
    return parts[0], parts[1]


def cmd_shortlist(args: argparse.Namespace) -> None:
    from interlingua.inference.api import load
    from interlingua.inference.shortlist_build import build_shortlist
    from interlingua.model_files.checkpoint import check_output
    check_output(args.out, [args.model, args.corpus], force=args.force)
    model = load(args.model, "cpu")
    given = {k: v for k, v in (("per_token", args.per_token), ("frequent", args.frequent)) if v is not None}
    shortlist = build_shortlist(model, args.corpus, max_pairs=args.max_pairs, progress=True, **given)
    out = shortlist.save(args.out)
    print(f"wrote {out}: {', '.join(f'{s}->{t}' for s, t in shortlist.directions)} "
          f"({shortlist.per_token} candidates per source subword, {shortlist.frequent} frequent); "
          f"translate with --shortlist {out}")


def cmd_check_int8(args: argparse.Namespace) -> None:
    from interlingua.inference.int8_probe import check_int8, check_path
    _use_threads(args.threads)
    check = check_int8(args.model, args.corpus, args.sentences)
    verdict = ("int8 holds: `--precision auto` picks int8 where it also decodes faster than fp32 / bf16"
               if check.holds else "int8 does not hold: `--precision auto` keeps fp32 / bf16")
    print(f"{check.why}; {verdict}; recorded in {check_path(args.model)}")


def cmd_embed(args: argparse.Namespace) -> None:
    import numpy as np

    from interlingua.atomic_files import atomic_output
    from interlingua.inference.api import load
    if args.other and not args.documents:
        raise InterlinguaError("--other goes with --documents (document vectors on both language sides)")
    if args.other and not args.output:
        raise InterlinguaError("--other writes several arrays (one per variant) into an .npz file: give it with -o")
    if args.documents and args.pooling != "mean":
        raise InterlinguaError("--documents gives one vector per document (--pooling mean)")
    if args.output:
        from interlingua.model_files.checkpoint import check_output
        check_output(args.output, [args.model, args.input], force=args.force, flag="-o")
    else:
        check_standard_output()
    check_input_path(args.input)  # a wrong path fails before the model loads; stdin is read after it
    model = load(args.model, args.device, args.precision)
    lines = read_input_lines(args.input)
    if args.documents:
        from interlingua.inference.documents import embed_documents
        docs = embed_documents(model, lines, args.lang, unit=args.unit, other=args.other,
                               batch_size=args.batch_size, progress=True)
        if args.other:
            with atomic_output(args.output) as f:  # a file object: numpy adds no `.npz` to the name
                np.savez(f, **docs.vectors)  # type: ignore[arg-type]  # numpy's stub: keys are array names
            log.info("wrote %s to %s", ", ".join(f"{k} {'x'.join(map(str, v.shape))}" for k, v in docs.vectors.items()),
                     args.output)
            return
        vecs = docs.vectors[args.lang]
    else:
        vecs = model.encode(lines, args.lang, pooling=args.pooling, batch_size=args.batch_size)
    if args.output:
        with atomic_output(args.output) as f:  # a file object: numpy adds no `.npy` to the name
            np.save(f, vecs)
    else:
        np.save(sys.stdout.buffer, vecs)
    log.info("wrote %s float32 vectors", "x".join(map(str, vecs.shape)))


def cmd_evaluate(args: argparse.Namespace) -> None:
    """`evaluate` and `analyze`: the chosen entry of `EVALUATIONS`, run with the options it declares."""
    from interlingua.evaluation.registry import EVALUATIONS
    entry = EVALUATIONS[args.evaluation]
    process = {o.dest: getattr(args, o.dest) for o in entry.options if o.process_wide}
    _use_threads(process.get("threads"))
    report = entry.run(**{o.dest: getattr(args, o.dest) for o in entry.arguments})
    print(report.markdown)
    print("written: " + ", ".join(str(f) for f in report.files))
    for note in report.notes:
        print(note)


def cmd_attention(args: argparse.Namespace) -> None:
    from interlingua.evaluation.sentence.heads import plot_head_heatmap
    from interlingua.inference.api import load
    maps = load(args.model, args.device).attention_maps([args.sentence], args.lang, self_attention=False)[0]
    if not maps.tokens:
        raise InterlinguaError("cannot show attention for an empty sentence")
    assert maps.bridge is not None  # asked for the bridge alone: a model without an attention bridge raised
    plot_head_heatmap(maps.bridge, maps.tokens, Path(args.output),
                      title=f"bridge attention ({args.lang}): {args.sentence}")
    print(f"written {args.output}")


def cmd_average(args: argparse.Namespace) -> None:
    from interlingua.model_files.checkpoint import average_checkpoints
    out = average_checkpoints(args.checkpoints, args.out, force=args.force)
    print(f"averaged {len(args.checkpoints)} checkpoint(s) into {out}")


def cmd_export(args: argparse.Namespace) -> None:
    if args.format == "ctranslate2":
        from interlingua.model_files.export import export_ctranslate2
        out = export_ctranslate2(args.model, args.out, args.quantization)
        size = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
        weights = "float32" if args.quantization == "none" else args.quantization
        print(f"wrote {out} ({size / 2**20:.1f} MiB, CTranslate2, {weights} weights); "
              f"how to call it: {out / 'README.md'}")
        return
    if args.quantization != "none":
        raise InterlinguaError("--quantization is for `export ctranslate2` (a model folder keeps the weights "
                               "as trained)")
    from interlingua.model_files.export import export_folder
    out = export_folder(args.model, args.out)
    size = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    print(f"wrote {out} ({size / 2**20:.1f} MiB: config.json, model.safetensors, sentencepiece models, README.md); "
          f"use it with: interlingua translate --model {out} ...")


def cmd_experiment(args: argparse.Namespace) -> None:
    from interlingua.experiment import run_experiments
    _use_threads(args.threads)
    runs = run_experiments([Path(r) for r in args.recipes], _device_override(args), Path(args.out), beam=args.beam,
                           max_test=args.max_test_sentences, jobs=args.jobs,
                           notes=Path(args.notes) if args.notes else None, pivot=args.pivot,
                           checkpoint=args.checkpoint, no_repeat_ngram=args.no_repeat_ngram)
    print(f"{len(runs)} run(s); table in {args.out}")


def port_number(text: str) -> int:
    """argparse type: a TCP port, 0 (any free port) to 65535."""
    return int(arguments.PORT.parse(text))


def cmd_serve(args: argparse.Namespace) -> None:
    import os

    from interlingua.serving.auth import api_key_from
    from interlingua.serving.limits import ServiceLimits
    from interlingua.serving.server import serve
    _use_threads(args.threads)
    limits = ServiceLimits(max_texts=args.max_texts, max_chars=args.max_chars, max_wait_ms=args.max_wait_ms,
                           max_batch_texts=args.max_batch_texts, max_batch_tokens=args.max_batch_tokens,
                           payload_limit=args.payload_limit, max_concurrent_requests=args.max_concurrent_requests,
                           request_timeout_s=args.request_timeout, read_timeout_s=args.read_timeout,
                           keep_alive_timeout_s=args.keep_alive_timeout, max_connections=args.max_connections)
    serve(args.model, host=args.host, port=args.port, device=args.device, precision=args.precision,
          engine=args.engine, limits=limits,
          api_key=api_key_from(args.api_key, os.environ), shortlist=args.shortlist)


def cmd_demo(args: argparse.Namespace) -> None:
    from interlingua.demo import run_demo
    run_demo(Path(args.work), minutes=args.minutes, data_from=args.source, test_sentences=args.max_sentences,
             precision=args.precision)


Commands = argparse._SubParsersAction  # `build_parser`'s subcommands, which each `_*_command` adds to


def _add_evaluations(parser: argparse.ArgumentParser, command: str) -> None:
    """`evaluate` / `analyze` from `EVALUATIONS`: the entries as choices, and each option its entries
    declare, once (its help says which entries take it when not all do)."""
    from interlingua.evaluation.registry import EVALUATIONS
    entries = EVALUATIONS.of(command)
    parser.add_argument("evaluation", choices=list(entries),
                        help="; ".join(f"{name}: {e.help}" for name, e in entries.items()))
    values = {"count": positive_int, "whole": non_negative_int, "beam": beam_size}
    for option in EVALUATIONS.options(command):
        if option.shared:
            {"--device": _add_device, "--precision": _add_precision}[option.flag](parser)
            continue
        takers = EVALUATIONS.takers(command, option)
        helptext = option.help + (f" [{', '.join(takers)}]" if len(takers) < len(entries) else "")
        kwargs: dict = {"help": helptext.strip()}
        if option.value == "switch":
            kwargs["action"] = "store_true"
        else:
            kwargs.update(default=option.default, action="append" if option.repeat else "store")
            if option.value in values:
                kwargs["type"] = values[option.value]
            for key in ("choices", "nargs", "metavar"):
                if getattr(option, key) is not None:
                    kwargs[key] = list(getattr(option, key)) if key == "choices" else getattr(option, key)
        if option.flag.startswith("-"):
            kwargs["required"] = option.required
            parser.add_argument(*option.aliases, option.flag, **kwargs)
        else:
            parser.add_argument(option.flag, **kwargs)
    parser.set_defaults(func=cmd_evaluate)


def _data_command(sub: Commands) -> None:
    """`interlingua data`: its arguments and its function."""
    d = sub.add_parser("data", help="download (or copy) a public data set")
    d.add_argument("dataset", choices=list(DATA_FOLDERS),
                   help="multi30k: translation corpus; europarl: Europarl v7 {de,es,fr}<->en with the WMT07 "
                        "dev2006/devtest2006/test2006 sets (paper 000); iwslt17: IWSLT 2017 multilingual TED "
                        "(de en it nl ro) with dev2010/tst2010 and a multi-way tst2010 (paper 004); "
                        "senteval: SentEval downstream tasks (put them in "
                        "<data-root>/senteval_downstream); xnli: XNLI dev (<data-root>/xnli); senteval-probing: "
                        "the ten official probing sets; webis-cls10: cross-lingual sentiment reviews for "
                        "`evaluate cldc` (<data-root>/webis_cls10); webis-monolingual: the review text of "
                        "Webis-CLS-10's training splits (--from) as sentences, added to --corpus as monolingual "
                        "training text for copy directions")
    d.add_argument("--dest", default=None, help="folder to put the files in (default: <data>/NAME, where "
                   "`evaluate` and the demo look: <data> is $INTERLINGUA_DATA, else ./data)")
    d.add_argument("--from", dest="source", default=None, help="copy from this local folder instead of downloading "
                   "(europarl: a folder holding the archives; iwslt17: the release archive or its files unpacked; "
                   "webis-monolingual: the Webis-CLS-10 folder to read)")
    d.add_argument("--corpus", default=None, help="webis-monolingual: the corpus YAML to extend")
    d.add_argument("--langs", nargs="+", default=None, metavar="LANG",
                   help="europarl: languages paired with English (default de es fr); iwslt17: languages to keep "
                        "(default all five); webis-monolingual: languages to take (default: those of --corpus "
                        "among en de fr)")
    d.set_defaults(func=cmd_data)


def _prepare_and_train_commands(sub: Commands) -> None:
    """`interlingua prepare` and `interlingua train`: its arguments and its function."""
    for name, func, helptext in (("prepare", cmd_prepare, "train sentencepiece and cache the encoded corpus"),
                                 ("train", cmd_train, "train a model from a YAML config (under torchrun: on several "
                                                           "processes, CPUs or GPUs, on one node or several)")):
        c = sub.add_parser(name, help=helptext)
        c.add_argument("config", help="experiment YAML")
        c.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config value, e.g. --set train.max_steps=500")
        if name == "prepare":
            c.add_argument("--force", action="store_true", help="re-prepare even if the cache is current")
        else:
            c.add_argument("--resume", action="store_true", help="continue from <work_dir>/last.pt")
            c.add_argument("--init", default=None, metavar="CHECKPOINT",
                           help="start from this checkpoint's weights and vocabularies (fine-tuning, e.g. after "
                                "`extend`; its model section must equal the config's), fresh optimizer and step")
            _add_device(c, overrides_config=True)
            c.add_argument("--processes", type=positive_int, default=1, metavar="N",
                           help="train in N processes on this machine (gloo on CPUs, nccl on GPUs: one per GPU), "
                                "as torchrun --standalone --nproc-per-node N would; several machines: torchrun")
        c.set_defaults(func=func)


def _extend_command(sub: Commands) -> None:
    """`interlingua extend`: its arguments and its function."""
    x = sub.add_parser("extend", help="add a language to a trained shared model (then fine-tune with train --init)")
    x.add_argument("checkpoint", help="the trained shared model")
    x.add_argument("--lang", required=True, help="the language to add (a language of the corpus)")
    x.add_argument("--out", required=True, help="where to write the extended checkpoint")
    x.add_argument("--corpus", default=None, help="corpus YAML with the language's training text "
                                                   "(default: the corpus the model was trained on)")
    x.add_argument("--vocab-size", type=positive_int, default=None,
                   help="the new language's sentencepiece size (default 4000)")
    x.add_argument("--noise", type=non_negative_float, default=None,
                   help="std of the Gaussian noise added to the mean of the old rows for each new id (default 0.01)")
    x.add_argument("--seed", type=non_negative_int, default=0, help="seed of that noise")
    _add_force(x, "--out")
    x.set_defaults(func=cmd_extend)


def _translate_command(sub: Commands) -> None:
    """`interlingua translate`: its arguments and its function."""
    t = sub.add_parser("translate", help="translate lines from stdin (or -i) to stdout (or -o)")
    t.add_argument("--model", required=True)
    t.add_argument("--src", required=True)
    t.add_argument("--tgt", required=True)
    t.add_argument("--pivot", default=None, help="translate through this language (src -> pivot -> tgt); "
                   "a pivot equal to --src or --tgt means the direct translation (a note says so)")
    t.add_argument("--beam", type=beam_size, default=5,
                   help=f"beam size (1: greedy search; at most {arguments.MAX_BEAM})")
    t.add_argument("--length-penalty", type=non_negative_float, default=1.0,
                   help="beam search ranks log p(y) / length**X (0: by log-probability alone)")
    t.add_argument("--beam-stop", choices=arguments.BEAM_STOPS, default="all",
                   help="when beam search is done with a sentence: all (default: once it has --beam finished "
                        "hypotheses) or top (also once a step's best candidate is finished; faster, OpenNMT-py's rule)")
    t.add_argument("--no-repeat-ngram", type=non_negative_int, default=0, metavar="N",
                   help="no N-gram of subwords twice in an output: ends the loops a decoder can fall into, zero-shot "
                        "directions most (default 0: off)")
    t.add_argument("--max-len", type=output_length, default=None,
                   help=f"at most this many output subwords, up to {arguments.MAX_OUTPUT_LEN} (default: twice each "
                        "sentence's own source length + 10)")
    t.add_argument("--batch-size", type=positive_int, default=64)
    t.add_argument("--threads", type=positive_int, default=None)
    t.add_argument("--workers", type=positive_int, default=1,
                   help="batches decoded at once, each in its own thread with a share of --threads (on 2 cores "
                        "2 workers ran 1.14-1.3x as fast as 1; the output is the same)")
    t.add_argument("-i", "--input", default=None)
    t.add_argument("-o", "--output", default=None)
    _add_force(t, "-o")
    t.add_argument("--shortlist", default=None, metavar="FILE",
                   help="a lexical shortlist (from `interlingua shortlist`): each sentence's output layer only over "
                        "the target subwords its source makes likely; faster, outputs may differ")
    _add_device(t)
    _add_precision(t)
    _add_engine(t)
    t.set_defaults(func=cmd_translate)


def _shortlist_command(sub: Commands) -> None:
    """`interlingua shortlist`: its arguments and its function."""
    sl = sub.add_parser("shortlist", help="count a lexical shortlist from the training bitext, for faster "
                                          "translation (--shortlist)")
    sl.add_argument("model", metavar="MODEL", help="a .pt checkpoint or a model folder")
    sl.add_argument("--out", required=True, help="the file to write (safetensors)")
    sl.add_argument("--corpus", default=None, help="corpus YAML whose train split is counted "
                                                   "(default: the corpus the model was trained on)")
    sl.add_argument("--per-token", type=positive_int, default=None,
                    help="target candidates per source subword (highest Dice coefficient; default 20)")
    sl.add_argument("--frequent", type=non_negative_int, default=None,
                    help="most frequent target subwords, always candidates (default 200)")
    sl.add_argument("--max-pairs", type=positive_int, default=None, help="count at most this many pairs per direction")
    _add_force(sl, "--out")
    sl.set_defaults(func=cmd_shortlist)


def _check_int8_command(sub: Commands) -> None:
    """`interlingua check-int8`: its arguments and its function."""
    ci = sub.add_parser("check-int8", help="measure once whether int8 translates as well as fp32 (dev BLEU) and "
                                           "record it beside the model, for --precision auto")
    ci.add_argument("model", metavar="MODEL", help="a .pt checkpoint or a model folder")
    ci.add_argument("--corpus", default=None, help="corpus YAML whose val split is translated "
                                                   "(default: the corpus the model was trained on)")
    ci.add_argument("--sentences", type=positive_int, default=200,
                    help="dev sentence pairs translated, shared out over the trained directions (default 200)")
    ci.add_argument("--threads", type=positive_int, default=None)
    ci.set_defaults(func=cmd_check_int8)


def _synthesize_command(sub: Commands) -> None:
    """`interlingua synthesize`: its arguments and its function."""
    sy = sub.add_parser("synthesize", help="pivot-based synthetic pairs as files, and a corpus YAML that `train` "
                                           "reads (the offline form of train.synthetic)")
    sy.add_argument("model", metavar="MODEL", help="a .pt checkpoint or a model folder")
    sy.add_argument("--out", required=True, help="the folder to write the pair files and corpus.yaml into")
    sy.add_argument("--corpus", default=None, help="corpus YAML whose train split is read "
                                                   "(default: the corpus the model was trained on)")
    sy.add_argument("--pivot", default="en", help="the language whose side is translated (default en)")
    sy.add_argument("--directions", nargs="+", default=None, metavar="SRC-TGT",
                    help="directions to make pairs for, e.g. de-fr fr-de (default: the model's zero-shot directions "
                         "it can make through the pivot)")
    sy.add_argument("--beam", type=beam_size, default=1, help="beam size of the made side (1: greedy)")
    sy.add_argument("--batch-size", type=positive_int, default=64)
    sy.add_argument("--max-lines", type=positive_int, default=None, help="at most this many pairs per direction")
    sy.add_argument("--threads", type=positive_int, default=None)
    _add_force(sy, "--out")
    _add_device(sy)
    _add_precision(sy)
    sy.set_defaults(func=cmd_synthesize)


def _embed_command(sub: Commands) -> None:
    """`interlingua embed`: its arguments and its function."""
    e = sub.add_parser("embed", help="sentence vectors (.npy) for lines from stdin (or -i)")
    e.add_argument("--model", required=True)
    e.add_argument("--lang", required=True)
    e.add_argument("--pooling", choices=arguments.POOLINGS, default="mean")
    e.add_argument("--batch-size", type=positive_int, default=64)
    e.add_argument("-i", "--input", default=None,
                   help="one sentence a line (with --documents: one document a line); "
                        "an empty line gets a vector of zeros")
    e.add_argument("-o", "--output", default=None, help=".npy file (default: stdout); .npz with --other")
    _add_force(e, "-o")
    e.add_argument("--documents", action="store_true",
                   help="document vectors (paper 003): the whole line as one sequence (--unit document, DV, at most "
                        "2,000 subwords) or the mean of its sentences "
                        "(--unit sentences, SV, at most 500 subwords each)")
    e.add_argument("--unit", choices=arguments.DOCUMENT_UNITS, default="document")
    e.add_argument("--other", default=None, metavar="LANG",
                   help="with --documents: also the vectors of the documents translated into LANG (greedy, sentence by "
                        "sentence) and both sides concatenated (a:b) and summed (a+b), into an .npz (-o)")
    _add_device(e)
    _add_precision(e)
    e.set_defaults(func=cmd_embed)


def _evaluate_command(sub: Commands) -> None:
    """`interlingua evaluate`: its arguments and its function."""
    _add_evaluations(sub.add_parser("evaluate", help="BLEU/chrF matrix, a sentence-vector suite, cross-lingual "
                                                     "document classification, or the cross-lingual report"),
                     "evaluate")


def _attention_command(sub: Commands) -> None:
    """`interlingua attention`: its arguments and its function."""
    a = sub.add_parser("attention", help="heat map of the bridge attention of one sentence")
    a.add_argument("--model", required=True)
    a.add_argument("--lang", required=True)
    a.add_argument("--output", default="attention.png")
    a.add_argument("sentence")
    _add_device(a)
    a.set_defaults(func=cmd_attention)


def _analyze_command(sub: Commands) -> None:
    """`interlingua analyze`: its arguments and its function."""
    _add_evaluations(sub.add_parser("analyze", help="bridge head entropy and heat maps (penalty study), BLEU by "
                                                    "source length, or per-layer encoder probes, SVCCA, language ID "
                                                    "and retrieval"), "analyze")


def _average_command(sub: Commands) -> None:
    """`interlingua average`: its arguments and its function."""
    g = sub.add_parser("average",
                       help="average the weights of checkpoints of one run into a translation-only checkpoint")
    g.add_argument("checkpoints", nargs="+", metavar="CKPT",
                   help="checkpoints of the same run (same config and vocabularies)")
    g.add_argument("--out", required=True, help="checkpoint to write")
    _add_force(g, "--out")
    g.set_defaults(func=cmd_average)


def _export_command(sub: Commands) -> None:
    """`interlingua export`: its arguments and its function."""
    o = sub.add_parser("export", help="write a model as a folder to ship: config.json, model.safetensors, "
                                      "sentencepiece models, README.md model card (loads without unpickling); "
                                      "or as a CTranslate2 model")
    o.add_argument("format", choices=["folder", "ctranslate2"],
                   help="folder: interlingua's own model folder; ctranslate2: a CTranslate2 model folder (shared "
                        "Transformer models without a bridge; needs pip install 'interlingua[ctranslate2]')")
    o.add_argument("model", metavar="MODEL", help="a .pt checkpoint, or a model folder")
    o.add_argument("out", metavar="OUT", help="the folder to write: new, empty, or a previous export of the same "
                                              "format (replaced whole)")
    o.add_argument("--quantization", default="none", choices=EXPORT_QUANTIZATIONS, metavar="TYPE",
                   help=f"ctranslate2 only: the weights' type, one of {', '.join(EXPORT_QUANTIZATIONS)} (default: "
                        f"none, float32 as trained)")
    o.set_defaults(func=cmd_export)


def _experiment_command(sub: Commands) -> None:
    """`interlingua experiment`: its arguments and its function."""
    x = sub.add_parser("experiment", help="train recipes, evaluate on test, write a paper-style results table")
    x.add_argument("recipes", nargs="+", help="recipe YAML files, e.g. recipes/multi30k/cpu/*.yaml")
    x.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every recipe")
    _add_device(x, overrides_config=True)
    x.add_argument("--out", default="docs/results/multi30k.md")
    x.add_argument("--beam", type=beam_size, default=1)
    x.add_argument("--no-repeat-ngram", type=non_negative_int, default=0, metavar="N",
                   help="score translations that write no N-gram of subwords twice (default 0: off)")
    x.add_argument("--max-test-sentences", type=positive_int, default=None)
    x.add_argument("--jobs", type=positive_int, default=1,
                   help="recipes trained at once, one thread each (e.g. one per core)")
    x.add_argument("--threads", type=positive_int, default=None,
                   help="torch threads for scoring (training uses each recipe's train.threads); 1 beside other jobs")
    x.add_argument("--notes", default=None, help="markdown file appended to the report (discussion of the numbers)")
    x.add_argument("--pivot", default=None, metavar="LANG",
                   help="also translate each run's zero-shot directions through LANG (zero-shot vs pivot)")
    x.add_argument("--checkpoint", choices=("selected", "last", "best", "averaged"), default="selected",
                   help="what is scored: selected (averaged.pt where the run made one, else best.pt; default), "
                        "or that file (e.g. last to compare the last weights with the average)")
    x.set_defaults(func=cmd_experiment)


def _serve_command(sub: Commands) -> None:
    """`interlingua serve`: its arguments and its function."""
    s = sub.add_parser("serve", help="HTTP service: translate, embed, OpenAI-style /v1/embeddings (docs at /docs)")
    s.add_argument("--model", required=True, metavar="MODEL",
                   help="a .pt checkpoint or a model folder (`export folder`)")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine only)")
    s.add_argument("--port", type=port_number, default=8080, help="TCP port (default: 8080; 0: any free port)")
    s.add_argument("--max-texts", type=positive_int, default=64, help="texts in one request (default: 64)")
    s.add_argument("--max-chars", type=positive_int, default=2000, help="characters in one text (default: 2000)")
    s.add_argument("--max-wait-ms", type=non_negative_float, default=0.0,
                   help="how long a request waits for others to share its model call when the model is idle "
                        "(default: 0; while the model is busy, requests gather anyway)")
    s.add_argument("--max-batch-texts", type=positive_int, default=64,
                   help="texts in one model call (default: 64; 1: no batching, each request is its own call)")
    s.add_argument("--max-batch-tokens", type=positive_int, default=8192,
                   help="subwords in one model call, estimated as characters capped at the model's max_len per "
                        "text (default: 8192; a single request with more runs alone)")
    s.add_argument("--payload-limit", type=positive_int, default=2_000_000,
                   help="bytes of one request body; more is a 413 before the body is read (default: 2000000)")
    s.add_argument("--max-concurrent-requests", type=positive_int, default=512,
                   help="model requests answered at once; one more is a 429 with Retry-After (default: 512)")
    s.add_argument("--request-timeout", type=positive_float, default=60.0, metavar="SECONDS",
                   help="a request without its answer this long after it came is a 503 and leaves the queue "
                        "(default: 60)")
    s.add_argument("--read-timeout", type=positive_float, default=30.0, metavar="SECONDS",
                   help="time a client has to send a request's head, and between parts of its body; a stalled "
                        "client gets a 408 and its connection closes (default: 30)")
    s.add_argument("--keep-alive-timeout", type=positive_float, default=5.0, metavar="SECONDS",
                   help="an idle keep-alive connection closes this long after its last answer (default: 5)")
    s.add_argument("--max-connections", type=positive_int, default=2048,
                   help="open connections; one more is answered 503 and closed (default: 2048)")
    s.add_argument("--api-key", default=None,
                   help="require Authorization: Bearer KEY on every endpoint but /health, the page and the docs "
                        "(default: the environment variable INTERLINGUA_API_KEY, else no key; empty: an error)")
    s.add_argument("--threads", type=positive_int, default=None, help="torch threads of the model (default: torch's)")
    _add_device(s)
    s.add_argument("--shortlist", default=None, metavar="FILE",
                   help="a lexical shortlist for translation (from `interlingua shortlist`; see translate --shortlist)")
    _add_precision(s)
    _add_engine(s)
    s.set_defaults(func=cmd_serve)


def _demo_command(sub: Commands) -> None:
    """`interlingua demo`: its arguments and its function."""
    m = sub.add_parser("demo", help="prepare Multi30k, train a small many-to-many model, translate and embed")
    m.add_argument("--work", default="demo_run")
    m.add_argument("--minutes", type=positive_float, default=8.0, help="training budget")
    m.add_argument("--from", dest="source", default=None,
                   help="local Multi30k folder (default: <data>/multi30k if it holds the files, else download; "
                        "<data> is $INTERLINGUA_DATA, else ./data)")
    m.add_argument("--max-sentences", type=positive_int, default=None, metavar="N",
                   help="translate and score only the first N test sentences (default: all 1,000; a quick look)")
    m.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16"),
                   help="training precision (default auto: bf16 where this CPU measures it faster, else fp32); "
                        "fixing it makes runs on different CPUs comparable")
    m.set_defaults(func=cmd_demo)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="interlingua", description="Multilingual NMT through a shared attention bridge.")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True)
    for add in (_data_command, _prepare_and_train_commands, _extend_command, _translate_command, _shortlist_command,
                _check_int8_command, _synthesize_command, _embed_command, _evaluate_command, _attention_command,
                _analyze_command, _average_command, _export_command, _experiment_command, _serve_command,
                _demo_command):
        add(sub)
    return p


class _Terminated(KeyboardInterrupt):
    """SIGTERM, outside training's own handling of it: the command stops as on Ctrl-C."""

    signum = signal.SIGTERM


def _raise_terminated(_signum: int, _frame: FrameType | None) -> None:
    raise _Terminated("SIGTERM")


@contextmanager
def _sigterm_as_ctrl_c() -> Iterator[None]:
    """For the whole command SIGTERM raises KeyboardInterrupt, as Ctrl-C does, so that a command it stops ends
    in one line wherever it was: preparing data, or ending on an error after training put its own handler back
    (a process of `train --processes N` whose peer died gets the launcher's SIGTERM just then; the default
    action would end it without a word). The handlers before (`_ending` changes SIGINT's too) are put back on
    return."""
    if threading.current_thread() is not threading.main_thread():  # signals are the main thread's business
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            if handler is not None:  # None: installed outside Python, cannot be put back from here
                signal.signal(sig, handler)


def _ending() -> None:
    """The command is ending and saying why: a stop signal now would cut that line short, so it is dropped."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)


def _os_problem(err: OSError) -> str:
    """`err` as "path: what is wrong" (Python's own form, "[Errno 2] No such file or directory: PosixPath('x')",
    leads with a number the user has no use for and quotes the path as Python code)."""
    if err.filename is None or not err.strerror:
        return str(err)
    paths = [os.fsdecode(f) for f in (err.filename, err.filename2) if f is not None]
    return f"{' -> '.join(paths)}: {err.strerror}"


def _last_line(err: BaseException) -> tuple[str, int]:
    """What a command that `err` ended prints on stderr, and its exit status."""
    if isinstance(err, _Terminated) and isinstance(err.__context__, InterlinguaError):
        err = err.__context__  # SIGTERM came while that error was on its way out: it is what ended the command
    if isinstance(err, InterlinguaError):
        return f"error: {err}", 2
    if isinstance(err, OSError):  # unwritable folders, full disks, unreadable files
        return f"error: {_os_problem(err)}", 1
    # Ctrl-C or SIGTERM; training saves last.pt first
    return (f"interrupted: {err}" if str(err) else "interrupted"), 128 + getattr(err, "signum", 2)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    with _sigterm_as_ctrl_c():
        try:
            tune_allocator()  # tensors' memory reused, not faulted in afresh at every step (interlingua.allocator)
            args.func(args)
        except (InterlinguaError, OSError, KeyboardInterrupt) as err:
            _ending()
            line, status = _last_line(err)
            print(line, file=sys.stderr)
            return status
    return 0


if __name__ == "__main__":
    sys.exit(main())
