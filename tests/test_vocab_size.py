"""A `preprocess.vocab_size` the training text cannot support: sentencepiece builds fewer pieces (a soft
limit), the run warns naming both sizes, and the config.json of its work_dir records the size built."""
from __future__ import annotations

import json
import logging

import pytest
from conftest import tiny_config

from interlingua.config import parse_config
from interlingua.inference.api import load
from interlingua.training.trainer import train

ASKED = 20000


@pytest.mark.parametrize("joint", [False, True])
def test_a_vocabulary_smaller_than_asked_is_warned_about_and_recorded(multi30k_corpus, tmp_path, caplog, joint):
    work = tmp_path / "run"
    cfg = tiny_config(multi30k_corpus, work, preprocess={"vocab_size": ASKED, "joint_vocab": joint},
                      train={"max_steps": 1, "valid_every": 1000, "log_every": 1})
    with caplog.at_level(logging.WARNING):
        result = train(parse_config(cfg))
    sizes = {lang: len(v) for lang, v in load(result.last_checkpoint).vocabs.items()}
    assert max(sizes.values()) < ASKED
    warnings = [r.getMessage() for r in caplog.records if "vocab_size" in r.getMessage()]
    assert len(warnings) == 1 if joint else len(warnings) >= len(sizes), warnings
    for lang, size in sizes.items():
        assert any(str(ASKED) in w and str(size) in w and (joint or f"'{lang}'" in w) for w in warnings), warnings
    recorded = json.loads((work / "config.json").read_text(encoding="utf-8"))
    assert recorded["preprocess"]["vocab_size"] == max(sizes.values())


def test_a_vocabulary_of_the_size_asked_says_nothing(multi30k_corpus, tmp_path, caplog):
    work = tmp_path / "run"
    cfg = tiny_config(multi30k_corpus, work, train={"max_steps": 1, "valid_every": 1000, "log_every": 1})
    with caplog.at_level(logging.WARNING):
        train(parse_config(cfg))
    assert not [r for r in caplog.records if "vocab_size" in r.getMessage()]
    assert json.loads((work / "config.json").read_text(encoding="utf-8"))["preprocess"]["vocab_size"] == 400
