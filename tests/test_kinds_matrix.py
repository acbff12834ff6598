"""Every combination of model kinds learns a synthetic task end to end, through the command line.

The task (in the manner of Sockeye's sequence-copy tests): language `xa` writes sentences of
2-6 words drawn from eight word types `a`..`h`; its translation in `xb` is the same sentence
reversed, each word mapped to a fixed `xb` word (`a`->`1`, ..., `h`->`8`). Every word is one
subword, so token accuracy is measured on words. Train, validation and test splits are
generated here (seeded); no test or validation sentence occurs in the training split.

For each entry of `KINDS` (`--set` overrides of the model's kinds) a tiny model is trained
with `interlingua train` for a few seconds and must then:
- translate the held-out test sentences with at least `MIN_ACCURACY` token accuracy;
- give identical translations from two separate loads of the saved checkpoint (greedy and
  beam search) and from `interlingua translate`;
- give the same output with beam search of beam 1 as with greedy search.

A new kind (another encoder, bridge or decoder) joins the matrix with one line in `KINDS`.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
import yaml
from conftest import tiny_config, write_multiway_corpus

from interlingua import Model, load
from interlingua.cli import main
from interlingua.data.vocab import PAD
from interlingua.modules.search import beam_search, greedy_search

# One line per combination of kinds: the `--set` overrides that select it (id: encoder-bridge-decoder).
# A kind that needs other settings (learning rate, steps) to learn the task sets them here too.
KINDS = [
    pytest.param({"model.encoder.type": "bilstm", "model.bridge.type": "attention", "model.decoder.type": "lstm"},
                 id="bilstm-attention-lstm"),
    pytest.param({"model.encoder.type": "bilstm", "model.bridge.type": "attention", "model.decoder.type": "lstm",
                  "model.decoder.input_feed": True},
                 id="bilstm-attention-lstm_feed"),
    pytest.param({"model.encoder.type": "bilstm", "model.bridge.type": "none", "model.decoder.type": "lstm"},
                 id="bilstm-none-lstm"),
    pytest.param({"model.encoder.type": "bilstm", "model.bridge.type": "none", "model.decoder.type": "lstm",
                  "model.decoder.input_feed": True},
                 id="bilstm-none-lstm_feed"),
    pytest.param({"model.encoder.type": "transformer", "model.bridge.type": "attention",
                  "model.decoder.type": "transformer", "model.encoder.positions": "learned",
                  "model.decoder.positions": "learned", "train.lr": 0.001},
                 id="transformer-attention-transformer"),
    pytest.param({"model.encoder.type": "transformer", "model.bridge.type": "none", "model.decoder.type": "transformer",
                  "train.lr": 0.001},
                 id="transformer-none-transformer"),
    pytest.param({"model.encoder.type": "bilstm", "model.bridge.type": "attention", "model.decoder.type": "transformer",
                  "model.decoder.positions": "learned", "train.lr": 0.003},
                 id="bilstm-attention-transformer"),
    pytest.param({"model.encoder.type": "bilstm", "model.bridge.type": "ntdv", "model.bridge.heads": 8,
                  "model.bridge.hidden": 64, "model.decoder.type": "lstm", "train.max_steps": 600,
                  "train.valid_every": 600},
                 id="bilstm-ntdv-lstm"),
]

STEPS = 300
MIN_ACCURACY = 0.85
"""Measured after 300 steps, training seeds 1-3: 0.92-0.94 (attention bridge), 0.92-0.99 (no bridge),
with or without input feeding; after 1 step: 0.01-0.07."""
MIN_ACCURACY_OF = {"bilstm-ntdv-lstm": 0.35}
"""Kinds built for another job. NTDV (paper 003) pools a sentence into r head vectors whose heads
score each token on its own, so reversing leans on the positions the BiLSTM encodes: measured 0.46
after 300 steps, 0.52 after 600, 0.66 after 900 (its usual place is on top of a frozen model)."""

SOURCE_WORDS = list("abcdefgh")
TARGET_WORD = {w: str(i) for i, w in enumerate(SOURCE_WORDS, start=1)}
SPLIT_SIZES = {"train": 2000, "val": 50, "test": 200}


def target_of(source: str) -> str:
    return " ".join(TARGET_WORD[w] for w in reversed(source.split()))


def token_accuracy(hypotheses: list[str], references: list[str]) -> float:
    """Words equal to the reference word at the same position, over max(len(hyp), len(ref))
    per sentence: a dropped or extra word costs every position after it."""
    correct = total = 0
    for hyp, ref in zip(hypotheses, references, strict=True):
        h, r = hyp.split(), ref.split()
        correct += sum(a == b for a, b in zip(h, r))
        total += max(len(h), len(r))
    return correct / total


@pytest.fixture(scope="module")
def synthetic_corpus(tmp_path_factory) -> Path:
    """Multi-way corpus YAML with train/val/test files of `xa` sentences and their `xb` translations."""
    root = tmp_path_factory.mktemp("kinds_corpus")
    rng = random.Random(3)

    def sentence() -> str:
        return " ".join(rng.choice(SOURCE_WORDS) for _ in range(rng.randint(2, 6)))

    held_out: set[str] = set()
    texts = {}
    for split in ("test", "val", "train"):
        lines = []
        while len(lines) < SPLIT_SIZES[split]:
            s = sentence()
            if split != "train" or s not in held_out:
                lines.append(s)
        held_out.update(lines)
        texts[split] = lines
    return write_multiway_corpus(root, "reverse_map", {split: {"xa": lines, "xb": [target_of(s) for s in lines]}
                                                       for split, lines in texts.items()})


def experiment_yaml(corpus: Path, work_dir: Path) -> Path:
    cfg = tiny_config(corpus, work_dir,
                      preprocess={"vocab_size": 50, "max_train_sentences": None, "max_valid_sentences": 50,
                                  "max_len": 20},
                      directions={"mode": "bilingual", "pairs": [["xa", "xb"]]},
                      model={"embed_dim": 32, "bridge": {"heads": 8, "hidden": 32}},
                      train={"max_steps": STEPS, "valid_every": STEPS, "log_every": 100, "batch_size": 32, "lr": 0.01,
                             "seed": 1, "threads": 1, "precision": "fp32"})
    cfg["name"] = "kinds"
    path = work_dir.parent / "experiment.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def padded(tr: Model, sentences: list[str], lang: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Model input for already normalised sentences: right-padded ids and lengths."""
    ids = tr.vocabs[lang].tokenize_batch(sentences)
    lengths = torch.tensor([len(x) for x in ids])
    src = torch.full((len(ids), int(lengths.max())), PAD, dtype=torch.long)
    for i, x in enumerate(ids):
        src[i, :len(x)] = torch.tensor(x)
    return src, lengths


@pytest.mark.parametrize("overrides", KINDS)
def test_kind_learns_the_task_and_translates_reproducibly(overrides, synthetic_corpus, tmp_path, capsys, request):
    config = experiment_yaml(synthetic_corpus, tmp_path / "run")
    sets = [arg for key, value in overrides.items() for arg in ("--set", f"{key}={json.dumps(value)}")]
    assert main(["train", str(config), *sets]) == 0
    assert f"trained {overrides.get('train.max_steps', STEPS)} steps" in capsys.readouterr().out
    ckpt = tmp_path / "run" / "best.pt"
    src_file = synthetic_corpus.parent / "test.xa"
    sources = src_file.read_text(encoding="utf-8").splitlines()
    references = (synthetic_corpus.parent / "test.xb").read_text(encoding="utf-8").splitlines()

    first = load(ckpt)
    for key, value in overrides.items():  # the checkpoint holds the settings asked for
        node = first._loaded.config
        for part in key.split("."):
            node = getattr(node, part)
        assert node == value, key
    greedy = first.translate(sources, "xa", "xb", beam=1)
    accuracy = token_accuracy(greedy, references)
    print(f"token accuracy {accuracy:.3f}")
    assert accuracy >= MIN_ACCURACY_OF.get(request.node.callspec.id, MIN_ACCURACY), \
        (accuracy, list(zip(sources, greedy, references))[:5])

    # save -> load -> the same translations: a second load, and the command line
    beam = first.translate(sources, "xa", "xb", beam=3)
    second = load(ckpt)
    assert second.translate(sources, "xa", "xb", beam=1) == greedy
    assert second.translate(sources, "xa", "xb", beam=3) == beam
    out_file = tmp_path / "out.xb"
    assert main(["translate", "--model", str(ckpt), "--src", "xa", "--tgt", "xb", "--beam", "1",
                 "-i", str(src_file), "-o", str(out_file)]) == 0
    assert out_file.read_text(encoding="utf-8").splitlines() == greedy

    # beam search with beam 1 is greedy search, token for token
    src, lengths = padded(second, sources, "xa")
    with torch.inference_mode():
        decoder, state = second._network.start_decoding(second._network.run_encoder(src, lengths, "xa"), "xb")
        by_greedy = greedy_search(decoder, state, 30)
        by_beam = beam_search(decoder, state, 30, beam_size=1)
    assert by_beam == by_greedy
