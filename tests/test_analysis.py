"""Penalty analysis (head entropy, Table 13) and BLEU by source length, via the CLI."""
import json

import numpy as np
import pytest
from sacrebleu.metrics import BLEU

from interlingua.cli import main
from interlingua.evaluation.bleu_matrix import load_split_texts, parallel_texts
from interlingua.evaluation.length_analysis import bucket_names, bucket_of
from interlingua.evaluation.penalty_analysis import head_entropy_table
from interlingua.inference.api import load


def test_attentions_are_distributions_over_each_sentence(trained_model):
    emb = load(trained_model)
    sents = ["a dog runs on the grass .", "two men .", "", "a woman in a red dress is singing on a stage ."]
    atts = bridge_attentions(emb, sents, batch_size=2)
    assert [a.shape[0] for a in atts] == [4] * 4 and atts[2].shape == (4, 0)
    for a in (atts[0], atts[1], atts[3]):
        assert np.allclose(a.sum(1), 1.0, atol=1e-5)
    one = emb.attention_maps([sents[3]], "en")[0]
    assert one.bridge.shape[1] == len(one.tokens)
    assert np.allclose(one.bridge, atts[3], atol=1e-6)  # batching does not change A


def bridge_attentions(model, sentences, batch_size=64):
    """The bridge's heads over each sentence's tokens, (k, n_i)."""
    return [m.bridge for m in model.attention_maps(sentences, "en", batch_size, self_attention=False)]


def _entropies_by_hand(attentions, max_tokens=40) -> dict[str, list[float]]:
    """-sum p log p of every head's row, grouped as Table 13: all heads, heads 1..n_i, heads n_i+1..k."""
    groups = {"all_heads": [], "up_to_length": [], "beyond_length": []}
    for A in attentions:
        n = A.shape[1]
        if not 0 < n <= max_tokens:
            continue
        A = A.astype(np.float64)
        ent = -np.sum(A * np.log(np.where(A > 0, A, 1.0)), axis=1)
        groups["all_heads"] += ent.tolist()
        groups["up_to_length"] += ent[:n].tolist()
        groups["beyond_length"] += ent[n:].tolist()
    return groups


def _assert_stats_match(stats, groups):
    for name, values in groups.items():
        assert stats[name]["count"] == len(values), name
        if values:
            assert stats[name]["mean"] == pytest.approx(np.mean(values), rel=1e-4, abs=1e-6), name
            assert stats[name]["std"] == pytest.approx(np.std(values), rel=1e-4, abs=1e-6), name
        else:
            assert stats[name]["mean"] is None, name


def test_head_entropy_is_the_entropy_of_each_heads_attention(trained_model):
    emb = load(trained_model)
    # "dog" and "men" have fewer subwords than the 4 heads: heads beyond the length get their own row
    sents = ["dog", "two men .", "", "men", "a dog runs on the grass .",
             "a woman in a red dress is singing on a stage ."]
    stats = head_entropy_table({"m": emb}, sents, "en")["m"]
    groups = _entropies_by_hand(bridge_attentions(emb, sents))
    assert stats["sentences"] == 5 and stats["heads"] == 4  # the empty line has no attention to measure
    assert groups["beyond_length"] and stats["up_to_length"]["count"] + stats["beyond_length"]["count"] == 5 * 4
    _assert_stats_match(stats, groups)


def test_analyze_heads_writes_table13_and_heat_maps(trained_model, untrained_model, multi30k_corpus, tmp_path, capsys):
    out = tmp_path / "heads"
    code = main(["analyze", "heads", "--model", f"with={trained_model}", "--model", f"fresh={untrained_model}",
                 "--lang", "en", "--corpus", str(multi30k_corpus), "--split", "val", "--out", str(out)])
    assert code == 0
    report = json.loads((out / "heads.json").read_text())
    a, b = report["stats"]["with"], report["stats"]["fresh"]
    assert a["heads"] == b["heads"] == 4 and a["sentences"] == b["sentences"] == 1014
    sentences = [s for g in load_split_texts(multi30k_corpus, "val") for s in g.get("en", [])]
    for stats, ckpt in ((a, trained_model), (b, untrained_model)):  # each model's own attention, not the first's
        _assert_stats_match(stats, _entropies_by_hand(bridge_attentions(load(ckpt), sentences)))
    # trained with the penalty, the heads focus on a few subwords; fresh weights spread over all of them
    assert a["all_heads"]["mean"] < 1.0 < 2.5 < b["all_heads"]["mean"], (a["all_heads"], b["all_heads"])
    md = (out / "heads.md").read_text()
    assert "1.73 / 0.82" in md  # the paper's numbers beside ours
    for stats in (a, b):
        row = stats["all_heads"]
        assert f"{row['mean']:.2f} ± {row['std']:.2f} ({row['count']})" in md
    for png in ("heads_with.png", "heads_fresh.png", "heads_all.png"):
        assert (out / png).stat().st_size > 1000


def test_length_buckets():
    assert bucket_names((10, 20, 30)) == ["1-10", "11-20", "21-30", "31+"]
    assert [bucket_of(n, (10, 20, 30)) for n in (1, 10, 11, 30, 31, 90)] == [0, 0, 1, 2, 3, 3]


def test_analyze_lengths_writes_table_and_plot(trained_model, untrained_model, multi30k_corpus, tmp_path, capsys):
    out = tmp_path / "len"
    code = main(["analyze", "lengths", "--model", str(trained_model), "--model", f"fresh={untrained_model}",
                 "--src", "en", "--tgt", "de", "--corpus", str(multi30k_corpus), "--split", "val", "--out", str(out)])
    assert code == 0
    result = json.loads((out / "length_buckets.json").read_text())
    src, ref = parallel_texts(load_split_texts(multi30k_corpus, "val"), "en", "de")
    by_words = [bucket_of(len(s.split()), (10, 20, 30)) for s in src]
    assert result["buckets"] == ["1-10", "11-20", "21-30", "31+"]
    assert result["counts"] == [by_words.count(i) for i in range(4)] and sum(result["counts"]) == 1014
    names = list(result["bleu"])
    assert names == [trained_model.parent.name, "fresh"]
    trained, fresh = result["bleu"][names[0]], result["bleu"]["fresh"]
    assert [v is None for v in trained] == [n == 0 for n in result["counts"]]
    assert all(t > f for t, f in zip(trained, fresh) if t is not None), (trained, fresh)  # each model translated
    # one bucket scored by hand: the trained model's translations of the 21-30 word sources
    bucket = [i for i, b in enumerate(by_words) if b == 2]
    hyps = load(trained_model).translate([src[i] for i in bucket], "en", "de", beam=1)
    by_hand = BLEU(lowercase=True, tokenize="13a").corpus_score(hyps, [[ref[i] for i in bucket]]).score
    assert trained[2] == pytest.approx(by_hand, abs=0.01)
    assert (out / "length_buckets.png").stat().st_size > 1000


def test_analyze_heads_unknown_language_and_missing_sentences_get_one_error(trained_model, tmp_path, capsys):
    assert main(["analyze", "heads", "--model", str(trained_model), "--lang", "xx", "--out", str(tmp_path)]) != 0
    assert "no encoder for 'xx'" in capsys.readouterr().err
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert main(["analyze", "heads", "--model", str(trained_model), "--lang", "en", "-i", str(empty),
                 "--out", str(tmp_path)]) != 0
    assert "no 'en' sentences" in capsys.readouterr().err
