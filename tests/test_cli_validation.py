"""Every numeric option of the command line is range-checked by the parser (usage error, exit 2,
the option named), the Python API refuses the same values in the same words (`interlingua.arguments`
holds both's bounds), and `embed` gives one vector per input line, empty lines included."""
from __future__ import annotations

import argparse
import io
import logging
import re
import sys

import numpy as np
import pytest
from test_decoding import random_checkpoint

from interlingua.cli import (
    beam_size,
    build_parser,
    main,
    non_negative_float,
    non_negative_int,
    output_length,
    port_number,
    positive_float,
    positive_int,
)
from interlingua.errors import ArgumentError, ArgumentTypeError

REQUIRED = {
    "translate": ["--model", "m.pt", "--src", "en", "--tgt", "de"],
    "embed": ["--model", "m.pt", "--lang", "en"],
    "evaluate": ["bleu", "--model", "m.pt"],
    "analyze": ["lengths", "--model", "m.pt"],
    "experiment": ["r.yaml"],
    "demo": [],
    "extend": ["m.pt", "--lang", "cs", "--out", "x.pt"],
    "serve": ["--model", "m.pt"],
    "shortlist": ["m.pt", "--out", "s.safetensors"],
    "check-int8": ["m.pt"],
    "synthesize": ["m.pt", "--out", "synthetic"],
    "train": ["c.yaml"],
}
# (command, option, range-checking type): every numeric option the parser has
NUMERIC = [
    ("translate", "--beam", beam_size), ("translate", "--length-penalty", non_negative_float),
    ("translate", "--max-len", output_length), ("translate", "--batch-size", positive_int),
    ("translate", "--threads", positive_int), ("translate", "--workers", positive_int),
    ("embed", "--batch-size", positive_int),
    ("evaluate", "--beam", beam_size), ("evaluate", "--batch-size", positive_int),
    ("evaluate", "--max-sentences", positive_int), ("evaluate", "--max-documents", positive_int),
    ("evaluate", "--threads", positive_int),
    ("evaluate", "--jobs", positive_int),
    ("analyze", "--beam", beam_size), ("analyze", "--max-sentences", positive_int),
    ("analyze", "--svcca-k", positive_int),
    ("experiment", "--beam", beam_size), ("experiment", "--max-test-sentences", positive_int),
    ("experiment", "--jobs", positive_int), ("experiment", "--threads", positive_int),
    ("experiment", "--no-repeat-ngram", non_negative_int), ("translate", "--no-repeat-ngram", non_negative_int),
    ("evaluate", "--no-repeat-ngram", non_negative_int),
    ("demo", "--minutes", positive_float), ("demo", "--max-sentences", positive_int),
    ("train", "--processes", positive_int),
    ("extend", "--vocab-size", positive_int), ("extend", "--noise", non_negative_float),
    ("extend", "--seed", non_negative_int),
    ("shortlist", "--per-token", positive_int), ("shortlist", "--frequent", non_negative_int),
    ("shortlist", "--max-pairs", positive_int),
    ("check-int8", "--sentences", positive_int), ("check-int8", "--threads", positive_int),
    ("serve", "--port", port_number), ("serve", "--max-texts", positive_int), ("serve", "--max-chars", positive_int),
    ("serve", "--max-wait-ms", non_negative_float), ("serve", "--max-batch-texts", positive_int),
    ("serve", "--threads", positive_int), ("serve", "--max-batch-tokens", positive_int),
    ("serve", "--payload-limit", positive_int), ("serve", "--max-concurrent-requests", positive_int),
    ("serve", "--request-timeout", positive_float), ("serve", "--read-timeout", positive_float),
    ("serve", "--keep-alive-timeout", positive_float), ("serve", "--max-connections", positive_int),
    ("synthesize", "--beam", beam_size), ("synthesize", "--batch-size", positive_int),
    ("synthesize", "--max-lines", positive_int), ("synthesize", "--threads", positive_int),
]
BAD = {positive_int: ["0", "-3", "2.5", "two", ""], beam_size: ["0", "65", "1000", "2.5", "wide"],
       output_length: ["0", "16385", "1000000000", "2.5", "long"],
       non_negative_int: ["-1", "2.5", "x"], non_negative_float: ["-0.5", "nan", "inf", "x"],
       positive_float: ["0", "-1", "nan", "inf", "soon"], port_number: ["-1", "65536", "80.5", "http"]}
GOOD = {positive_int: ("1", 1), beam_size: ("64", 64), output_length: ("16384", 16384), non_negative_int: ("0", 0),
        non_negative_float: ("0", 0.0),
        positive_float: ("0.5", 0.5),
        port_number: ("0", 0)}


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_numeric_option_is_listed_and_range_checked():
    found = set()
    for command, sub in _subparsers(build_parser()).items():
        for action in sub._actions:
            numeric = action.type in (int, float, positive_int, non_negative_int, non_negative_float, positive_float,
                                      beam_size, output_length, port_number) or \
                (isinstance(action.default, (int, float)) and not isinstance(action.default, bool))
            if numeric and action.option_strings:
                found.add((command, action.option_strings[-1], action.type))
    assert found == set(NUMERIC)


@pytest.mark.parametrize("command, option, kind", NUMERIC, ids=[f"{c} {o}" for c, o, _ in NUMERIC])
def test_out_of_range_values_are_usage_errors(command, option, kind, capsys):
    for bad in BAD[kind]:
        with pytest.raises(SystemExit) as exit_info:
            main([command, *REQUIRED[command], option, bad])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2, (option, bad)
        assert err.startswith("usage: interlingua " + command) and f"argument {option}: " in err, err
        assert "Traceback" not in err
    text, value = GOOD[kind]
    args = build_parser().parse_args([command, *REQUIRED[command], option, text])
    assert getattr(args, option.lstrip("-").replace("-", "_")) == value


def test_messages_say_what_is_expected(capsys):
    for argv, needle in ((["--beam", "0"], "argument --beam: must be >= 1, got 0"),
                         (["--batch-size", "many"], "argument --batch-size: expected a whole number, got 'many'"),
                         (["--length-penalty", "-1"], "argument --length-penalty: must be >= 0, got -1")):
        with pytest.raises(SystemExit):
            main(["translate", *REQUIRED["translate"], *argv])
        assert needle in capsys.readouterr().err


# `interlingua translate`'s options and `Model.translate`'s arguments: the option, the argument, and
# values the parser reads as numbers of the right kind but refuses
TRANSLATE_OPTIONS = [("--beam", "beam", int, ["0", "65", "1000"]),
                     ("--max-len", "max_len", int, ["0", "-2", "16385", "100000", "1000000000"]),
                     ("--batch-size", "batch_size", int, ["0", "-1"]), ("--workers", "workers", int, ["0", "-1"]),
                     ("--length-penalty", "length_penalty", float, ["-0.5", "nan", "inf", "-inf"])]


def _usage_error(argv: list[str], option: str, capsys) -> str:
    with pytest.raises(SystemExit):
        main(argv)
    err = capsys.readouterr().err
    return err.split(f"argument {option}: ", 1)[1].strip()


@pytest.mark.parametrize("option, name, kind, values", TRANSLATE_OPTIONS, ids=[o for o, *_ in TRANSLATE_OPTIONS])
def test_the_python_api_refuses_what_the_cli_refuses_in_the_same_words(trained_model, option, name, kind, values,
                                                                       capsys):
    import interlingua
    model = interlingua.load(trained_model, "cpu")
    for text in values:
        cli_says = _usage_error(["translate", *REQUIRED["translate"], f"{option}={text}"], option, capsys)
        with pytest.raises(ArgumentError) as info:
            model.translate(["a dog runs ."], "en", "de", **{name: kind(text)})
        assert str(info.value) == f"{name}: {cli_says}", text
        with pytest.raises(ArgumentError, match=f"^{name}: "):  # the same check before the representation is used
            model.generate(model.represent(["a dog runs ."], "en"), "de", **{name: kind(text)})


@pytest.mark.parametrize("value", [2.5, 3.0, "5", None, True, [2]])
def test_a_beam_of_another_type_is_refused_naming_beam(trained_model, value):
    import interlingua
    model = interlingua.load(trained_model, "cpu")
    with pytest.raises(ArgumentTypeError, match=r"^beam: expected a whole number, got "):
        model.translate(["a dog runs ."], "en", "de", beam=value)
    with pytest.raises(TypeError, match="^max_len: expected a whole number"):
        model.translate(["a dog runs ."], "en", "de", max_len=float(10**9))
    with pytest.raises(TypeError, match="^length_penalty: expected a number, got '1'"):
        model.translate(["a dog runs ."], "en", "de", length_penalty="1")


def test_choices_and_languages_are_checked_alike(trained_model, capsys):
    import interlingua
    model = interlingua.load(trained_model, "cpu")
    for option, argv, call in (
            ("--beam-stop", ["translate", *REQUIRED["translate"], "--beam-stop", "first"],
             lambda: model.translate(["a"], "en", "de", beam=2, beam_stop="first")),
            ("--pooling", ["embed", *REQUIRED["embed"], "--pooling", "first"],
             lambda: model.encode(["a"], "en", pooling="first")),
            ("--precision", ["translate", *REQUIRED["translate"], "--precision", "first"],
             lambda: interlingua.load(trained_model, "cpu", precision="first"))):
        cli_says = _usage_error(argv, option, capsys)
        with pytest.raises(ArgumentError) as info:
            call()
        name = option.lstrip("-").replace("-", "_")
        assert str(info.value).startswith(f"{name}: invalid choice: 'first'"), str(info.value)
        assert cli_says.startswith("invalid choice: 'first'")
        choices = [w for w in re.findall(r"\w+", cli_says.split("(", 1)[1]) if w not in ("choose", "from")]
        assert choices and all(f"'{c}'" in str(info.value) for c in choices), (cli_says, str(info.value))
    for name, args in (("src", (None, "de")), ("tgt", ("en", 5))):
        with pytest.raises(ArgumentTypeError, match=f"^{name}: expected a language code"):
            model.translate(["a"], *args)
    with pytest.raises(ArgumentTypeError, match="^pivot: expected a language code"):
        model.translate(["a"], "en", "de", pivot=b"fr")
    with pytest.raises(ArgumentTypeError, match="^device: expected a device name"):
        interlingua.load(trained_model, 0)


# ---- empty lines through `embed` -------------------------------------------------------------

LINES = ["a dog runs .", "", "the woman eats", "   ", "a cat\u2028sits ."]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return random_checkpoint(tmp_path_factory.mktemp("embed") / "random.pt", param_init=0.5)


@pytest.mark.parametrize("pooling", ["mean", "heads"])
@pytest.mark.parametrize("source", ["stdin", "file"])
def test_embed_gives_one_row_per_line_and_zeros_for_empty_lines(checkpoint, tmp_path, monkeypatch, caplog,
                                                                pooling, source):
    from interlingua.inference.api import load
    text = "\n".join(LINES) + "\n"
    argv = ["embed", "--model", str(checkpoint), "--lang", "en", "--pooling", pooling, "-o", str(tmp_path / "v.npy")]
    if source == "file":
        (tmp_path / "in.txt").write_text(text, encoding="utf-8")
        argv += ["-i", str(tmp_path / "in.txt")]
    else:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode("utf-8")), encoding="utf-8"))
    caplog.set_level(logging.WARNING, logger="interlingua")
    assert main(argv) == 0
    vecs = np.load(tmp_path / "v.npy")
    emb = load(checkpoint)
    assert vecs.shape == ((5, 64) if pooling == "mean" else (5, 4, 64))
    for i, line in enumerate(LINES):
        if line.strip():
            assert np.allclose(vecs[i], emb.encode([line], "en", pooling=pooling)[0], atol=1e-5), i
            assert np.abs(vecs[i]).max() > 0
        else:
            assert (vecs[i] == 0).all(), i
    assert "2 empty input line(s): their vectors are zeros" in caplog.text


def test_translate_and_embed_agree_on_lines(checkpoint, tmp_path, capsys):
    """The same input file: as many translations as vectors, empty where the vector is zero."""
    (tmp_path / "in.txt").write_text("\n".join(LINES) + "\n\n", encoding="utf-8")
    assert main(["translate", "--model", str(checkpoint), "--src", "en", "--tgt", "de", "--max-len", "5",
                 "-i", str(tmp_path / "in.txt")]) == 0
    out = capsys.readouterr().out.split("\n")
    assert out[-1] == "" and len(out) - 1 == len(LINES) + 1
    assert main(["embed", "--model", str(checkpoint), "--lang", "en", "-i", str(tmp_path / "in.txt"),
                 "-o", str(tmp_path / "v.npy")]) == 0
    vecs = np.load(tmp_path / "v.npy")
    assert len(vecs) == len(LINES) + 1
    assert [t == "" for t in out[:-1]] == [not v.any() for v in vecs]


def test_embed_only_empty_lines(checkpoint, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\n\n"), encoding="utf-8"))
    assert main(["embed", "--model", str(checkpoint), "--lang", "en", "-o", str(tmp_path / "v.npy")]) == 0
    vecs = np.load(tmp_path / "v.npy")
    assert vecs.shape == (2, 64) and not vecs.any()


def test_input_that_is_not_utf8_is_one_clear_error(checkpoint, tmp_path, capsys):
    (tmp_path / "in.txt").write_bytes(b"a dog \xff\xfe .\n")
    assert main(["embed", "--model", str(checkpoint), "--lang", "en", "-i", str(tmp_path / "in.txt"),
                 "-o", str(tmp_path / "v.npy")]) == 2
    err = capsys.readouterr().err
    assert "is not UTF-8 text" in err and "Traceback" not in err


@pytest.mark.parametrize("raw, needle", [
    (b"a dog runs .\ntwo men \xff\xfe .\n", "stdin: line 2 is not UTF-8 text (byte 0xff at column 9)"),
    (b"ok\r\nok\n\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "stdin: line 3 is not UTF-8 text (byte 0x89 at column 1)"),
    (b"ok\nbinary\x00data\n", "stdin: line 2 holds NUL bytes: binary data, not text"),
], ids=["latin1", "png", "nul"])
@pytest.mark.parametrize("command", ["translate", "embed"])
def test_stdin_that_is_not_text_names_the_line(checkpoint, tmp_path, monkeypatch, capsys, raw, needle, command):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8"))
    args = ["--src", "en", "--tgt", "de"] if command == "translate" else ["--lang", "en", "-o", str(tmp_path / "v.npy")]
    assert main([command, "--model", str(checkpoint), *args]) == 2
    out = capsys.readouterr()
    assert out.err.strip() == f"error: {needle}" and out.out == ""
    assert not (tmp_path / "v.npy").exists()


def test_files_the_cli_reads_name_the_bad_line(tmp_path, capsys):
    """A corpus file, a corpus YAML and a config YAML with a Latin-1 byte: one error naming file and line."""
    from interlingua.data.corpus import load_corpus, read_lines
    from interlingua.errors import InterlinguaError
    bad = tmp_path / "train.en"
    bad.write_bytes("one\ntwo\ncaf\xe9\n".encode("latin-1"))
    with pytest.raises(InterlinguaError, match=rf"{bad}: line 3 is not UTF-8 text \(byte 0xe9 at column 4\)"):
        read_lines(bad)
    gz = tmp_path / "train.de.gz"
    import gzip
    gz.write_bytes(gzip.compress(b"eins\n\xff\n"))
    with pytest.raises(InterlinguaError, match="line 2 is not UTF-8"):
        read_lines(gz)
    corpus = tmp_path / "corpus.yaml"
    corpus.write_bytes(b"languages: [en, de]\n# caf\xe9\n")
    with pytest.raises(InterlinguaError, match=rf"{corpus}: line 2 is not UTF-8"):
        load_corpus(corpus)
    config = tmp_path / "run.yaml"
    config.write_bytes(b"name: x\n# \xff\n")
    assert main(["train", str(config)]) == 2
    assert f"{config}: line 2 is not UTF-8 text" in capsys.readouterr().err


def test_line_splitting_is_the_same_for_files_and_stdin():
    from interlingua.textio import decode_lines
    assert decode_lines(b"", "x") == []
    assert decode_lines(b"a\r\nb\rc\n\nd", "x") == ["a", "b", "c", "", "d"]
    assert decode_lines("a\u2028b\x0cc\n".encode(), "x") == ["a\u2028b\x0cc"]
