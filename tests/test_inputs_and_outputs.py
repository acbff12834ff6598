"""What goes into the library (texts that are not a list of valid strings) and what comes out of the
command line (files that appear whole, under the exact name given, or not at all)."""
from __future__ import annotations

import errno
import os
import stat
import sys

import numpy as np
import pytest
from test_decoding import random_checkpoint

from interlingua.atomic_files import atomic_output, disk_full, write_text_atomic
from interlingua.cli import main
from interlingua.data.inputs import check_input_texts, text_problem
from interlingua.inference.api import load
from interlingua.inference.documents import embed_documents


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return random_checkpoint(tmp_path_factory.mktemp("io") / "random.pt")


@pytest.fixture(scope="module")
def model(checkpoint):
    return load(checkpoint, "cpu")


# ---- texts into the library --------------------------------------------------------------------

CALLS = {
    "translate": lambda m, texts: m.translate(texts, "en", "de"),
    "encode": lambda m, texts: m.encode(texts, "en"),
    "represent": lambda m, texts: m.represent(texts, "en"),
    "attention_maps": lambda m, texts: m.attention_maps(texts, "en"),
    "token_ids": lambda m, texts: m.token_ids(texts, "en"),
    "embed_documents": lambda m, texts: embed_documents(m, texts, "en"),
}


@pytest.mark.parametrize("call", CALLS)
def test_a_bare_string_is_refused_not_read_character_by_character(model, call):
    with pytest.raises(TypeError, match=r"a list of strings, got a single str: pass \[(text|doc)\]"):
        CALLS[call](model, "ein hund rennt")


@pytest.mark.parametrize("call", CALLS)
def test_a_lone_surrogate_is_a_value_error_naming_the_item(model, call):
    with pytest.raises(ValueError, match=r"(texts|docs)\[1\] is not valid Unicode text: U\+D800 at character 2"):
        CALLS[call](model, ["a dog", "ok\ud800", "a cat"])


@pytest.mark.parametrize("bad, kind", [([1, "a dog"], "int"), (["a dog", None], "NoneType"),
                                       (["a dog", b"bytes"], "bytes")])
def test_items_that_are_not_strings_are_type_errors_naming_the_item(model, bad, kind):
    index = next(i for i, x in enumerate(bad) if not isinstance(x, str))
    with pytest.raises(TypeError, match=rf"texts\[{index}\] is of type {kind}, not a string"):
        model.translate(bad, "en", "de")


def test_a_cut_line_is_named_by_its_number(model, caplog):
    long = " ".join(["a man rides a bike ."] * 60)
    texts = ["a dog .", long, "two men .", long]
    with caplog.at_level("WARNING", logger="interlingua.data.inputs"):
        model.translate(texts, "en", "de")
    assert "2 input line(s) longer than max_len=" in caplog.text and "truncated (lines 2, 4)" in caplog.text
    assert model.truncated(texts, "en") == [1, 3]


def test_valid_texts_pass_unchanged():
    texts = ("a dog", "", "emoji \U0001F600", "ünïcödé")
    assert check_input_texts(texts) is texts
    assert [text_problem(t) for t in texts] == [None] * 4
    assert "surrogate" in (text_problem("\udcff") or "")


# ---- files out of the command line -------------------------------------------------------------

def _no_temporaries(folder) -> None:
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_embed_writes_exactly_the_name_given(checkpoint, tmp_path):
    src = tmp_path / "in.en"
    src.write_text("a dog runs .\nthe woman eats\n", encoding="utf-8")
    out = tmp_path / "vectors.txt"
    assert main(["embed", "--model", str(checkpoint), "--lang", "en", "-i", str(src), "-o", str(out)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.en", "vectors.txt"]
    assert np.load(out).shape[0] == 2


def test_embed_onto_a_read_only_file_fails_and_leaves_it(checkpoint, tmp_path, capsys):
    src = tmp_path / "in.en"
    src.write_text("a dog runs .\n", encoding="utf-8")
    out = tmp_path / "vectors.txt"
    out.write_bytes(b"old")
    out.chmod(0o444)
    assert main(["embed", "--model", str(checkpoint), "--lang", "en", "-i", str(src), "-o", str(out)]) == 1
    assert "is read-only" in capsys.readouterr().err
    assert out.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["in.en", "vectors.txt"]


def _full_disk(monkeypatch) -> None:
    """Every fsync fails as on a full disk: the write got as far as the kernel, not onto the disk."""
    def fsync(_fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.parametrize("command", ["translate", "embed"])
def test_a_full_disk_leaves_the_old_output_whole(checkpoint, tmp_path, monkeypatch, capsys, command):
    src = tmp_path / "in.en"
    src.write_text("a dog runs .\nthe woman eats\n", encoding="utf-8")
    out = tmp_path / "out"
    out.write_bytes(b"the previous output\n")
    _full_disk(monkeypatch)
    extra = ["--tgt", "de", "--src", "en", "--beam", "1"] if command == "translate" else ["--lang", "en"]
    assert main([command, "--model", str(checkpoint), *extra, "-i", str(src), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "no space left on device" in err.lower() and str(out) in err and "Traceback" not in err
    assert out.read_bytes() == b"the previous output\n"
    _no_temporaries(tmp_path)


def test_a_full_disk_leaves_no_new_file(checkpoint, tmp_path, monkeypatch):
    src = tmp_path / "in.en"
    src.write_text("a dog runs .\n", encoding="utf-8")
    _full_disk(monkeypatch)
    assert main(["embed", "--model", str(checkpoint), "--lang", "en", "-i", str(src), "-o",
                 str(tmp_path / "vectors.npy")]) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.en"]


def test_translate_output_is_replaced_whole(checkpoint, tmp_path):
    src = tmp_path / "in.en"
    src.write_text("a dog runs .\n", encoding="utf-8")
    out = tmp_path / "out.de"
    out.write_text("a much longer previous output\nwith two lines\n", encoding="utf-8")
    out.chmod(0o640)
    assert main(["translate", "--model", str(checkpoint), "--src", "en", "--tgt", "de", "--beam", "1",
                 "-i", str(src), "-o", str(out)]) == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 1
    assert stat.S_IMODE(out.stat().st_mode) == 0o640  # the file's permissions are kept
    _no_temporaries(tmp_path)


# ---- the writer itself ----------------------------------------------------------------------------

def test_an_error_inside_the_block_keeps_the_old_file(tmp_path):
    path = tmp_path / "table.md"
    write_text_atomic(path, "old")
    with pytest.raises(KeyError):
        with atomic_output(path) as f:
            f.write(b"half of the new")
            raise KeyError("stop")
    assert path.read_text() == "old"
    _no_temporaries(tmp_path)


def test_a_full_disk_wrapped_by_torch_is_named(tmp_path):
    wrapped = RuntimeError("[enforce fail at inline_container.cc:664] . PytorchStreamWriter failed writing file "
                           "data/0: file write failed")
    assert disk_full(wrapped) and not disk_full(RuntimeError("shape mismatch"))
    with pytest.raises(OSError) as info:
        with atomic_output(tmp_path / "last.pt"):
            raise wrapped
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(tmp_path / "last.pt")
    assert not list(tmp_path.iterdir())


def test_a_folder_is_not_overwritten(tmp_path):
    with pytest.raises(IsADirectoryError):
        write_text_atomic(tmp_path, "text")


@pytest.mark.parametrize("command", [["translate", "--src", "en", "--tgt", "de"], ["embed", "--lang", "en"]])
def test_a_missing_input_or_a_folder_given_as_input_is_one_line_before_the_model_loads(tmp_path, capsys, command):
    never_loaded = tmp_path / "no-model.pt"  # were the model loaded first, its absence would be the error
    for given, says in ((tmp_path, f"{tmp_path} is a folder: give the input file (one sentence per line)"),
                        (tmp_path / "absent.txt", f"input file not found: {tmp_path / 'absent.txt'}")):
        assert main([command[0], "--model", str(never_loaded), *command[1:], "-i", str(given)]) != 0
        assert capsys.readouterr().err.strip() == f"error: {says}"


@pytest.mark.parametrize("command", [["translate", "--src", "en", "--tgt", "de"], ["embed", "--lang", "en"]])
def test_a_closed_standard_input_or_output_is_one_line_before_the_model_loads(tmp_path, capsys, monkeypatch,
                                                                               command):
    """Started with stdin or stdout closed (`0<&-`, `1>&-`: Python then has no `sys.stdin` / `sys.stdout`), a
    command that would read or write it says so in one line instead of a traceback, before loading the model."""
    never_loaded = tmp_path / "no-model.pt"  # were the model loaded first, its absence would be the error
    (tmp_path / "in.txt").write_text("a dog .\n", encoding="utf-8")
    argv = [command[0], "--model", str(never_loaded), *command[1:]]
    with monkeypatch.context() as closed:
        closed.setattr(sys, "stdin", None)
        assert main(argv) == 2
    assert capsys.readouterr().err.strip() == \
        "error: no input: standard input is closed; give the input file with -i FILE"
    with monkeypatch.context() as closed:
        closed.setattr(sys, "stdout", None)
        assert main(argv + ["-i", str(tmp_path / "in.txt")]) == 2
    assert capsys.readouterr().err.strip() == \
        "error: no output: standard output is closed; give an output file with -o FILE"


def test_a_pipe_or_a_device_reads_as_a_file(checkpoint, tmp_path, capsys):
    """`-i <(zcat in.gz)` names a pipe (/dev/fd/N), `-i /dev/null` a device: inputs like files."""
    (tmp_path / "in.txt").write_text("a dog .\ntwo men .\n", encoding="utf-8")
    argv = ["translate", "--model", str(checkpoint), "--src", "en", "--tgt", "de", "-i"]
    assert main(argv + [str(tmp_path / "in.txt")]) == 0
    from_file = capsys.readouterr().out
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    import threading
    # a daemon: were the command to fail before opening the pipe, the writer would wait in open() for ever
    writer = threading.Thread(target=lambda: fifo.write_text("a dog .\ntwo men .\n", encoding="utf-8"), daemon=True)
    writer.start()
    assert main(argv + [str(fifo)]) == 0
    writer.join(30)
    assert not writer.is_alive()
    assert capsys.readouterr().out == from_file and from_file.count("\n") == 2
    assert main(argv + [os.devnull]) == 0 and capsys.readouterr().out == ""
