"""Pivot translation: src -> pivot -> tgt is exactly two translations by hand, in the library
and on the command line; a pivot equal to the source or target means the direct translation."""
from __future__ import annotations

import logging
import subprocess
import sys

import pytest
from test_decoding import random_checkpoint

from interlingua.cli import main
from interlingua.errors import LanguageError
from interlingua.inference.api import load

SENTENCES = ["a dog runs in the park .", "the woman eats a red ball", "", "small child sits near the big street .",
             "the cat"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    # large uniform weights: translations depend on the input, so the pivot route differs from the direct one
    return random_checkpoint(tmp_path_factory.mktemp("pivot") / "random.pt", langs=("en", "de", "fr"), param_init=0.5)


@pytest.fixture(scope="module")
def translator(checkpoint):
    return load(checkpoint)


@pytest.mark.parametrize("settings", [{}, {"beam": 3, "length_penalty": 0.5, "max_len": 15, "batch_size": 2}])
def test_pivot_is_two_translations_by_hand(translator, settings):
    through = translator.translate(SENTENCES, "en", "fr", pivot="de", **settings)
    mid = translator.translate(SENTENCES, "en", "de", **settings)
    assert through == translator.translate(mid, "de", "fr", **settings)
    assert len(through) == len(SENTENCES) and through[2] == ""
    assert through != translator.translate(SENTENCES, "en", "fr", **settings)


@pytest.mark.parametrize("pivot, role", [("en", "source"), ("fr", "target")])
def test_pivot_equal_to_source_or_target_is_the_direct_translation(translator, caplog, pivot, role):
    caplog.set_level(logging.INFO, logger="interlingua")
    out = translator.translate(SENTENCES, "en", "fr", pivot=pivot, beam=2)
    assert out == translator.translate(SENTENCES, "en", "fr", beam=2)
    notes = [r.getMessage() for r in caplog.records if "pivot" in r.getMessage()]
    assert notes == [f"pivot '{pivot}' is the {role} language: translating en->fr directly"]


def test_pivot_needs_a_decoder_and_an_encoder(translator):
    with pytest.raises(LanguageError, match="no decoder for 'xx'"):
        translator.translate(SENTENCES, "en", "fr", pivot="xx")


def test_cli_pivot_matches_the_library(translator, checkpoint, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    argv = ["translate", "--model", str(checkpoint), "--src", "en", "--tgt", "fr", "-i", str(tmp_path / "in.txt"),
            "--beam", "2"]
    assert main(argv + ["--pivot", "de", "-o", str(tmp_path / "out.txt")]) == 0
    lines = (tmp_path / "out.txt").read_text(encoding="utf-8").split("\n")
    assert lines == translator.translate(SENTENCES, "en", "fr", pivot="de", beam=2) + [""]
    capsys.readouterr()
    assert main(argv + ["--pivot", "en"]) == 0
    assert capsys.readouterr().out.split("\n")[:-1] == translator.translate(SENTENCES, "en", "fr", beam=2)


def test_cli_says_when_the_pivot_is_the_source(checkpoint):
    """What a user sees: the direct translation on stdout and one note on stderr."""
    proc = subprocess.run([sys.executable, "-m", "interlingua.cli", "translate", "--model", str(checkpoint),
                           "--src", "en", "--tgt", "de", "--pivot", "de"],
                          input="a dog .\n", capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 1
    assert "pivot 'de' is the target language: translating en->de directly" in proc.stderr
