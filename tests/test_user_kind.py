"""A kind of one's own is one module: a throw-away encoder kind, written to a temporary folder that
is on the path and named in `model.kind_modules`, trains through `interlingua train` and translates,
in this process and in a fresh one, with no other file touched."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest
import yaml
from conftest import tiny_config, write_multiway_corpus

from interlingua import load
from interlingua.cli import main
from interlingua.config import parse_config
from interlingua.errors import ConfigError

MODULE = "throwaway_gru_kind"
KIND_SOURCE = '''"""A one-layer bidirectional GRU encoder: a kind that lives outside the package."""
from typing import Literal

import torch
from pydantic import Field
from torch import nn

from interlingua.config import KindConfig
from interlingua.data.vocab import PAD
from interlingua.modules.base import Encoder
from interlingua.modules.registry import ENCODERS

BUILT: list[int] = []
"""The `hidden` of every encoder built, so a test can see that this kind was used."""


class GRUEncoderConfig(KindConfig):
    type: Literal["throwaway_gru"] = "throwaway_gru"
    hidden: int = Field(32, ge=2)


@ENCODERS.register("throwaway_gru", config=GRUEncoderConfig)
class GRUEncoder(Encoder):
    def __init__(self, vocab_size: int, embed_dim: int, hidden: int):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD)
        self.gru = nn.GRU(embed_dim, hidden // 2, batch_first=True, bidirectional=True)
        self.output_dim = hidden

    @classmethod
    def from_config(cls, cfg, *, vocab_size, embed_dim, **_):
        BUILT.append(cfg.hidden)
        return cls(vocab_size, embed_dim, cfg.hidden)

    def forward(self, src, lengths):
        mask = torch.arange(src.size(1), device=src.device)[None, :] < lengths[:, None]
        packed = nn.utils.rnn.pack_padded_sequence(self.embed(src), lengths.cpu(), batch_first=True,
                                                   enforce_sorted=False)
        states, _ = nn.utils.rnn.pad_packed_sequence(self.gru(packed)[0], batch_first=True,
                                                     total_length=src.size(1))
        return states, mask
'''

WORDS = list("abcdef")


def test_a_kind_module_of_ones_own_trains_and_translates(tmp_path, monkeypatch, capsys):
    kinds_dir = tmp_path / "my_kinds"
    kinds_dir.mkdir()
    (kinds_dir / f"{MODULE}.py").write_text(KIND_SOURCE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(kinds_dir))

    rng = random.Random(5)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 5))) for _ in range(240)]
    copy = {"train": lines[:200], "val": lines[200:]}
    corpus = write_multiway_corpus(tmp_path, "copy", {s: {"xa": ls, "xb": [x.upper() for x in ls]}
                                                       for s, ls in copy.items()})
    cfg = tiny_config(corpus, tmp_path / "run",
                      preprocess={"vocab_size": 50, "max_train_sentences": None, "max_valid_sentences": 40},
                      directions={"mode": "bilingual", "pairs": [["xa", "xb"]]},
                      model={"kind_modules": [MODULE], "embed_dim": 16,
                             "encoder": {"type": "throwaway_gru", "hidden": 24}, "bridge": {"heads": 2, "hidden": 8},
                             "decoder": {"hidden": 24, "layers": 1}},
                      train={"max_steps": 40, "valid_every": 40, "log_every": 10, "threads": 1, "precision": "fp32",
                             "device": "cpu"})
    config = tmp_path / "experiment.yaml"
    config.write_text(yaml.safe_dump(cfg), encoding="utf-8")

    assert main(["train", str(config)]) == 0
    assert "trained 40 steps" in capsys.readouterr().out
    user_kind = sys.modules[MODULE]
    assert user_kind.BUILT == [24]
    stored = json.loads((tmp_path / "run" / "config.json").read_text(encoding="utf-8"))["model"]
    assert stored["kind_modules"] == [MODULE] and stored["encoder"] == {"type": "throwaway_gru", "hidden": 24}

    ckpt = tmp_path / "run" / "best.pt"
    sources = copy["val"][:10]
    here = load(ckpt).translate(sources, "xa", "xb", beam=1)
    assert user_kind.BUILT == [24, 24] and len(here) == len(sources)

    # a fresh process imports the kind's module from the checkpoint's config, given only the path to it
    src_file = tmp_path / "src.xa"
    src_file.write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(kinds_dir), *sys.path])}
    run = subprocess.run([sys.executable, "-c",
                          "import sys; from interlingua.cli import main; sys.exit(main(sys.argv[1:]))",
                          "translate", "--model", str(ckpt), "--src", "xa", "--tgt", "xb", "--beam", "1",
                          "-i", str(src_file), "--threads", "1"],
                         capture_output=True, text=True, env=env, timeout=300, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == here


def test_a_kind_module_that_does_not_import_is_named_by_its_key_path():
    with pytest.raises(ConfigError, match=r"model\.kind_modules: .*cannot import 'no_such_kinds_module'"):
        parse_config({"corpus": "c.yaml", "model": {"kind_modules": ["no_such_kinds_module"]}})
    with pytest.raises(ConfigError, match=r"model\.encoder: unknown type 'not_registered'; known types: .*'bilstm'"):
        parse_config({"corpus": "c.yaml", "model": {"encoder": {"type": "not_registered"}}})
