"""Streaming preparation: flat memory-mapped id files, sentencepiece on a sample, cleaning per reason."""
import json

import numpy as np
import pytest
from conftest import tiny_config, write_multiway_corpus

from interlingua.config import parse_config
from interlingua.data import prepare as prepare_module
from interlingua.data.batching import DirectionBatches
from interlingua.data.prepare import direction_pairs, prepare
from interlingua.data.token_store import TokenSequences
from interlingua.errors import DataError


def test_token_sequences_select_and_concat_without_copying_ids():
    a = TokenSequences.of([np.array([1, 2]), np.array([], dtype=np.int64), np.array([3, 4, 5])])
    b = TokenSequences.of([np.array([9])])
    both = TokenSequences.concat([a.select(np.array([2, 0])), b])
    assert [x.tolist() for x in both] == [[3, 4, 5], [1, 2], [9]]
    assert both.lengths.tolist() == [3, 2, 1]
    assert both.parts[0] is a.parts[0]  # views into the same ids
    assert [x.tolist() for x in both.select(slice(1, 3))] == [[1, 2], [9]]


def _corpus(tmp_path, n=60):
    en = [f"the dog number {i} runs" for i in range(n)]
    de = [f"der hund nummer {i} rennt" for i in range(n)]
    en += ["the dog number 0 runs", "", "short", "long " * 30, "the dog number 5 runs"]
    de += ["der hund nummer 0 rennt", "leer", "ein ganz langer satz " * 8, "lang", "der hund nummer 6 rennt"]
    return write_multiway_corpus(tmp_path, "c", {"train": {"en": en, "de": de}, "val": {"en": en[:5], "de": de[:5]}})


def test_cleaning_counts_each_reason_and_keeps_the_rest(tmp_path):
    corpus = _corpus(tmp_path)
    clean = {"dedup": True, "max_ratio": 3.0, "drop_long": True}
    cfg = parse_config(tiny_config(corpus, tmp_path / "w", preprocess={"vocab_size": 120, "max_len": 20,
                                                                       "max_train_sentences": None, "clean": clean}))
    data = prepare(cfg)
    report = data.cleaning["train"]["multiway"]
    # line 60 repeats line 0 (a duplicate); 61 has an empty side; 62 and 63 are too long on one side
    # or far apart in length; 64 pairs line 5's English with another German line (not a duplicate)
    assert report["lines"] == 65 and report["dropped"]["duplicate"] == 1 and report["dropped"]["empty"] == 1
    assert report["dropped"].get("too_long", 0) + report["dropped"].get("ratio", 0) == 2
    assert report["kept"] == 61
    src, tgt = direction_pairs(data, "train", "en", "de")
    assert len(src) == 61
    assert json.loads((tmp_path / "w" / "data" / "cleaning.json").read_text())["train"]["multiway"] == report
    assert data.cleaning["val"]["multiway"] == {"lines": 5}  # evaluation sets are never filtered
    # ids are memory-mapped from flat files, not held as arrays per line
    assert isinstance(data.groups("train")[0].ids["en"].parts[0], np.memmap)


def test_cleaning_off_keeps_duplicates_and_truncates(tmp_path):
    corpus = _corpus(tmp_path)
    cfg = parse_config(tiny_config(corpus, tmp_path / "w", preprocess={"vocab_size": 120, "max_len": 20,
                                                                       "max_train_sentences": None}))
    data = prepare(cfg)
    assert data.cleaning["train"]["multiway"]["kept"] == 64  # only the line with an empty side goes
    src, tgt = direction_pairs(data, "train", "en", "de")
    assert max(src.lengths.max(), tgt.lengths.max()) == 20


def test_language_filter_drops_lines_in_another_language(tmp_path):
    en = ["the children are playing in the garden"] * 3 + ["die kinder spielen im garten mit dem hund"]
    de = ["die kinder spielen im garten"] * 3 + ["die kinder spielen im garten und lachen"]
    en = [f"{x} {i}" for i, x in enumerate(en)]
    corpus = write_multiway_corpus(tmp_path, "c", {"train": {"en": en, "de": de}})
    cfg = parse_config(tiny_config(corpus, tmp_path / "w", preprocess={"vocab_size": 60, "max_train_sentences": None,
                                                                       "clean": {"language_id": True}}))
    report = prepare(cfg).cleaning["train"]["multiway"]
    assert report["dropped"] == {"language": 1} and report["kept"] == 3


def test_vocabulary_learned_from_a_sample_and_chunks_stream(tmp_path, monkeypatch):
    monkeypatch.setattr(prepare_module, "CHUNK_ROWS", 7)  # many chunks, and a last short one
    corpus = _corpus(tmp_path)
    base = {"vocab_size": 80, "max_len": 20, "max_train_sentences": None}
    whole = prepare(parse_config(tiny_config(corpus, tmp_path / "a", preprocess=base)))
    monkeypatch.setattr(prepare_module, "CHUNK_ROWS", 20_000)
    again = prepare(parse_config(tiny_config(corpus, tmp_path / "b", preprocess=base)))
    for lang in ("en", "de"):
        assert [x.tolist() for x in whole.groups("train")[0].ids[lang]] == \
            [x.tolist() for x in again.groups("train")[0].ids[lang]]
    sampled = prepare(parse_config(tiny_config(corpus, tmp_path / "c", preprocess={**base, "vocab_sample": 1000})))
    assert len(sampled.vocabs["en"]) > 10


def test_batches_over_memory_mapped_pairs_resume_where_they_stopped(tmp_path):
    corpus = _corpus(tmp_path)
    data = prepare(parse_config(tiny_config(corpus, tmp_path / "w", preprocess={"vocab_size": 120, "max_len": 20,
                                                                                "max_train_sentences": None})))
    src, tgt = direction_pairs(data, "train", "en", "de")
    first = DirectionBatches(src, tgt, "en", "de", batch_size=8, seed=3)
    for _ in range(5):
        first.next()
    state = first.state_dict()
    expected = [first.next().src.tolist() for _ in range(4)]
    second = DirectionBatches(src, tgt, "en", "de", batch_size=8, seed=3)
    second.load_state_dict(state)
    assert [second.next().src.tolist() for _ in range(4)] == expected
    idx = second.next_indices()
    assert second.tokens(idx) == sum(len(src[i]) + len(tgt[i]) + 1 for i in idx)


def test_files_that_end_apart_are_named_even_when_streamed(tmp_path, monkeypatch):
    monkeypatch.setattr(prepare_module, "CHUNK_ROWS", 4)
    (tmp_path / "a.en").write_text("".join(f"line {i}\n" for i in range(10)))
    (tmp_path / "a.de").write_text("".join(f"zeile {i}\n" for i in range(13)))
    (tmp_path / "c.yaml").write_text("languages: [en, de]\nsplits:\n  train: {en: a.en, de: a.de}\n")
    cfg = parse_config(tiny_config(tmp_path / "c.yaml", tmp_path / "w", preprocess={"max_train_sentences": None}))
    with pytest.raises(DataError, match=r"different line counts: .*a.de has 13, .*a.en has 10"):
        prepare(cfg)


def test_prepare_command_reports_what_cleaning_dropped(tmp_path, capsys):
    import yaml

    from interlingua.cli import main
    corpus = _corpus(tmp_path)
    cfg = tiny_config(corpus, tmp_path / "w", preprocess={"vocab_size": 120, "max_len": 20, "max_train_sentences": None,
                                                          "clean": {"dedup": True}})
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["prepare", str(tmp_path / "run.yaml")]) == 0
    out = capsys.readouterr().out
    assert "train/multiway: kept 63 of 65 lines (dropped: empty 1, duplicate 1)" in out


def _ids(data, split="train"):
    return {lang: [x.tolist() for x in seqs] for lang, seqs in data.groups(split)[0].ids.items()}


@pytest.mark.parametrize("damage", ["ids cut short", "lengths garbled", "meta.json garbled", "model garbled",
                                    "file deleted"])
def test_a_damaged_prepared_cache_is_prepared_again_not_trained_on(tmp_path, damage, caplog):
    """The cache is derived data: one that cannot be what preparing wrote is logged and prepared again, giving the
    same ids and vocabularies as the first time (before, a file cut short was read as shorter sentences, or ended
    in a traceback)."""
    cfg = parse_config(tiny_config(_corpus(tmp_path), tmp_path / "w",
                                   preprocess={"vocab_size": 80, "max_len": 20, "max_train_sentences": None}))
    first = prepare(cfg)
    expected, protos = _ids(first), {lang: v.proto for lang, v in first.vocabs.items()}
    cache = tmp_path / "w" / "data"
    ids = cache / "encoded" / "train.0.de.ids"
    if damage == "ids cut short":
        ids.write_bytes(ids.read_bytes()[:40])
    elif damage == "lengths garbled":
        (cache / "encoded" / "train.0.en.len.npy").write_bytes(b"garbage")
    elif damage == "meta.json garbled":
        (cache / "meta.json").write_text("{", encoding="utf-8")
    elif damage == "model garbled":
        (cache / "de.model").write_bytes((cache / "de.model").read_bytes()[:100])
    else:
        ids.unlink()
    with caplog.at_level("WARNING", logger="interlingua.data.prepare"):
        again = prepare(cfg)
    damaged = [r.getMessage() for r in caplog.records if "is damaged" in r.getMessage()]
    assert len(damaged) == 1 and f"the prepared data in {cache} is damaged" in damaged[0], caplog.text
    assert "allow_pickle" not in damaged[0]  # numpy's advice to unpickle the file is not passed on
    assert _ids(again) == expected and {lang: v.proto for lang, v in again.vocabs.items()} == protos
    assert prepare(cfg).groups("train")[0].ids["de"].lengths.tolist() == [len(x) for x in expected["de"]]


def test_a_vocabulary_from_a_sample_is_the_same_in_every_process(tmp_path):
    """Sentencepiece's own sampling drew other sentences in each process even with its seed set, so a corpus prepared
    again (its cache deleted) gave other ids than the checkpoints trained on it."""
    import subprocess
    import sys
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(f"sentence {i} with words {i % 97} and {i * 7 % 13}\n" for i in range(5000)),
                     encoding="utf-8")
    code = ("import hashlib, sys\nfrom interlingua.data.vocab import Vocab\n"
            "text = open(sys.argv[1], encoding='utf-8').read().splitlines()\n"
            "print(hashlib.sha256(Vocab.train(iter(text), 200, sample=1000).proto).hexdigest())")
    digests = {subprocess.run([sys.executable, "-c", code, str(lines)], capture_output=True, text=True,
                              check=True).stdout.strip() for _ in range(2)}
    assert len(digests) == 1 and len(next(iter(digests))) == 64


def test_reservoir_sample_keeps_k_items_drawn_uniformly():
    from collections import Counter

    from interlingua.data.vocab import reservoir_sample
    assert reservoir_sample(iter(["a", "b"]), 5, seed=0) == ["a", "b"]
    assert reservoir_sample((str(i) for i in range(1000)), 10, seed=3) == reservoir_sample(
        (str(i) for i in range(1000)), 10, seed=3)
    counts = Counter(x for seed in range(1500) for x in reservoir_sample((str(i) for i in range(30)), 3, seed))
    # 1500 draws of 3 of 30: each item 150 times expected (binomial sd ~11.6); a skew toward the first or last
    # items (the reservoir's start, a skip rule off by one) would put some far outside this
    assert sum(counts.values()) == 4500 and min(counts.values()) > 110 and max(counts.values()) < 190, counts
