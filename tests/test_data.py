import gzip
import json
import logging

import pytest
from conftest import MULTI30K, tiny_config

from interlingua.config import parse_config
from interlingua.data.batching import DirectionBatches, make_batch
from interlingua.data.corpus import load_corpus, normalize_line, read_group
from interlingua.data.download import get_multi30k
from interlingua.data.prepare import direction_pairs, prepare
from interlingua.data.vocab import BOS, EOS, PAD
from interlingua.errors import DataError


def write_corpus(tmp_path, en_lines, de_lines):
    (tmp_path / "a.en").write_text("".join(x + "\n" for x in en_lines))
    with gzip.open(tmp_path / "a.de.gz", "wt") as f:
        f.write("".join(x + "\n" for x in de_lines))
    (tmp_path / "corpus.yaml").write_text(
        "languages: [en, de]\nsplits:\n  train: {en: a.en, de: a.de.gz}\n  val: {en: a.en, de: a.de.gz}\n")
    return tmp_path / "corpus.yaml"


def test_mismatched_line_counts_name_files_and_counts(tmp_path):
    path = write_corpus(tmp_path, ["a", "b", "c"], ["x", "y"])
    group = load_corpus(path).groups("train")[0]
    with pytest.raises(DataError, match=r"a\.en has 3.*a\.de\.gz has 2"):
        read_group(group)


def test_missing_file_and_unknown_language(tmp_path):
    (tmp_path / "c.yaml").write_text("languages: [en, de]\nsplits:\n  train: {en: missing.en, de: x.de}\n")
    with pytest.raises(DataError, match="train/multiway/en not found"):
        load_corpus(tmp_path / "c.yaml")
    (tmp_path / "d.yaml").write_text("languages: [en]\nsplits:\n  train: {fr: x.fr}\n")
    with pytest.raises(DataError, match="language 'fr' not in languages"):
        load_corpus(tmp_path / "d.yaml")
    with pytest.raises(DataError, match="corpus file not found"):
        load_corpus(tmp_path / "none.yaml")
    (tmp_path / "x.de").mkdir()
    (tmp_path / "e.yaml").write_text("languages: [de]\nsplits:\n  train: {de: x.de}\n")
    with pytest.raises(DataError, match="train/multiway/de is a folder, not a file"):
        load_corpus(tmp_path / "e.yaml")


def test_empty_lines_skipped_and_long_lines_truncated_with_warnings(tmp_path, caplog):
    en = ["a small dog runs", "", "the cat sleeps"] * 20 + ["word " * 300]
    de = ["ein kleiner hund rennt", "leer", ""] * 20 + ["wort " * 300]
    path = write_corpus(tmp_path, en, de)
    cfg = parse_config(tiny_config(path, tmp_path / "w",
                                   preprocess={"max_len": 30, "vocab_size": 60, "max_train_sentences": None}))
    with caplog.at_level(logging.WARNING):
        data = prepare(cfg)
    assert "train/multiway: lines longer than max_len=30 subwords were truncated: de 1, en 1" in caplog.text
    assert data.cleaning["train"]["multiway"] == {"lines": 61, "kept": 21, "dropped": {"empty": 40},
                                                  "truncated": {"de": 1, "en": 1}}
    assert json.loads((tmp_path / "w" / "data" / "cleaning.json").read_text()) == data.cleaning
    src, tgt = direction_pairs(data, "train", "en", "de")
    assert len(src) == 21  # 20 complete pairs + the long one; pairs with an empty side are gone
    assert max(len(s) for s in src) == 30


def test_normalisation():
    assert normalize_line("  Ａ  Dog\t runs ", lowercase=True, normalize=True) == "a dog runs"
    assert normalize_line("A Dog", lowercase=False, normalize=True) == "A Dog"


def test_multi30k_copy_is_checksummed(tmp_path):
    if not (MULTI30K / "train.en.gz").is_file():
        from conftest import missing
        missing("no local Multi30k")
    corpus = get_multi30k(tmp_path / "m", MULTI30K)
    c = load_corpus(corpus)
    assert set(c.splits) == {"train", "val", "test_2016_flickr"} and sorted(c.languages) == ["cs", "de", "en", "fr"]
    # a damaged local mirror is refused
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in MULTI30K.glob("*.gz"):
        (bad / f.name).write_bytes(f.read_bytes())
    (bad / "val.fr.gz").write_bytes(b"garbage")
    with pytest.raises(DataError, match="checksum mismatch for val.fr.gz"):
        get_multi30k(tmp_path / "m2", bad)
    with pytest.raises(DataError, match="not found"):
        get_multi30k(tmp_path / "m3", tmp_path / "empty")


def test_batches_are_bucketed_seeded_and_resumable():
    import numpy as np
    rng = np.random.default_rng(0)
    src = [rng.integers(4, 50, rng.integers(1, 30)) for _ in range(500)]
    tgt = [rng.integers(4, 50, len(s) + rng.integers(0, 3)) for s in src]  # lengths correlate, as in real bitext
    it = DirectionBatches(src, tgt, "en", "de", batch_size=16, seed=5, pool=10)
    b = it.next()
    assert b.src.shape[0] == 16 and (b.tgt_in[:, 0] == BOS).all()
    assert ((b.tgt_out == EOS).sum(1) == 1).all()
    # bucketing keeps padding far below that of random batches
    pad = sum(int((it.next().src == PAD).sum()) for _ in range(10))
    order = rng.permutation(500)
    random_pad = sum(max(len(src[i]) for i in order[k:k + 16]) * 16 - sum(len(src[i]) for i in order[k:k + 16])
                     for k in range(0, 160, 16))
    assert pad < random_pad / 4
    state = it.state_dict()
    ahead = [it.next().src for _ in range(40)]  # crosses an epoch boundary (32 batches per epoch)
    again = DirectionBatches(src, tgt, "en", "de", batch_size=16, seed=5, pool=10)
    again.load_state_dict(state)
    assert all(torch_equal(a, again.next().src) for a in ahead)


def torch_equal(a, b):
    return a.shape == b.shape and bool((a == b).all())


def test_make_batch_layout():
    import numpy as np
    b = make_batch([np.array([5, 6, 7]), np.array([8])], [np.array([9]), np.array([10, 11])], "en", "de", src_prefix=4)
    assert b.src.tolist() == [[4, 5, 6, 7], [4, 8, 0, 0]] and b.src_lengths.tolist() == [4, 2]
    assert b.tgt_in.tolist() == [[BOS, 9, PAD], [BOS, 10, 11]]
    assert b.tgt_out.tolist() == [[9, EOS, PAD], [10, 11, EOS]]


def test_per_pair_corpus_trains_both_pairs(tmp_path):
    """A corpus of bitexts (`pairs:`), not multi-way files: each direction reads its own pair."""
    (tmp_path / "p.de").write_text("ein hund\nzwei katzen\n" * 10)
    (tmp_path / "p.en").write_text("a dog\ntwo cats\n" * 10)
    (tmp_path / "q.fr").write_text("un chien\ndeux chats\nun oiseau\n" * 10)
    (tmp_path / "q.en").write_text("a dog\ntwo cats\na bird\n" * 10)
    (tmp_path / "c.yaml").write_text(
        "languages: [de, en, fr]\npairs:\n  train:\n    de-en: {de: p.de, en: p.en}\n    fr-en: {fr: q.fr, en: q.en}\n")
    cfg = parse_config(tiny_config(tmp_path / "c.yaml", tmp_path / "w", preprocess={"vocab_size": 50},
                                   directions={"mode": "pivot", "pivot": "en"}))
    data = prepare(cfg)
    assert len(direction_pairs(data, "train", "de", "en")[0]) == 20
    assert len(direction_pairs(data, "train", "en", "fr")[0]) == 30
    assert len(direction_pairs(data, "train", "de", "fr")[0]) == 0  # no de-fr bitext: zero-shot only


def test_monolingual_text_beside_a_corpus_feeds_only_the_copy_directions(tmp_path):
    """`write_corpus_with_monolingual`: the base corpus's groups unchanged, one training group per
    language of extra text, which adds lines to A->A and to nothing else."""
    from conftest import write_multiway_corpus

    from interlingua.data.corpus import write_corpus_with_monolingual
    base_dir = tmp_path / "base"
    base_dir.mkdir()
    words = "dog cat runs sits red blue a the man woman street grass jumps walks small big old young".split()
    lines = [" ".join(words[(i * 7 + k * 5) % len(words)] for k in range(6)) for i in range(30)]
    base = write_multiway_corpus(base_dir, "toy", {"train": {"en": lines, "de": lines[::-1]},
                                                    "val": {"en": lines[:5], "de": lines[:5]}})
    extra = ["the red dog sits .", "  a  blue cat runs  ", ""]
    out = write_corpus_with_monolingual(base, tmp_path / "with_mono", "reviews", {"en": extra})
    corpus = load_corpus(out)
    assert [g.name for g in corpus.splits["train"]] == ["multiway", "reviews.en"]
    assert corpus.splits["val"][0].files["en"].resolve() == (base_dir / "val.en").resolve()
    assert read_group(corpus.splits["train"][1]) == {"en": ["the red dog sits .", "a blue cat runs"]}
    cfg = parse_config(tiny_config(out, tmp_path / "w", preprocess={"vocab_size": 50, "max_train_sentences": None},
                                   directions={"mode": "pivot", "pivot": "en", "monolingual": True}))
    data = prepare(cfg)
    assert len(direction_pairs(data, "train", "en", "en")[0]) == 32
    assert len(direction_pairs(data, "train", "de", "de")[0]) == 30
    assert len(direction_pairs(data, "train", "en", "de")[0]) == 30
    with pytest.raises(DataError, match="not a language of corpus"):
        write_corpus_with_monolingual(base, tmp_path / "bad", "reviews", {"fr": extra})
