"""Non-finite numbers (inf, nan) in a config are refused wherever a number is accepted: `train.lr: inf`
would pass a `> 0` bound, and every loss would be NaN."""
from __future__ import annotations

import pytest
import yaml
from conftest import tiny_config

from interlingua.cli import main
from interlingua.config import load_config
from interlingua.errors import ConfigError


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(tiny_config(tmp_path / "corpus.yaml", tmp_path / "run")), encoding="utf-8")
    return path


def test_train_lr_inf_is_one_clear_error(config_file, capsys):
    assert main(["train", str(config_file), "--set", "train.lr=inf"]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "Traceback" not in err, err
    assert "train.lr: Input should be a finite number" in errors[0]


@pytest.mark.parametrize("override", ["train.lr=.inf", "train.lr=nan", "train.lr=-.inf", "train.max_minutes=inf",
                                      "train.clip_norm=.nan", "model.dropout=nan", "preprocess.clean.max_ratio=inf",
                                      "train.adam_betas=[0.9, .nan]", "train.agreement.temperature=inf",
                                      "model.param_init=inf"])
def test_every_float_refuses_non_finite_numbers(config_file, override):
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=rf"{key.replace('.', '[.]')}(\.\d)?: Input should be a finite number"):
        load_config(config_file, [override])


def test_finite_numbers_still_pass(config_file):
    assert load_config(config_file, ["train.lr=1e-3", "train.max_minutes=0.5"]).train.lr == 1e-3
