"""Penalty analysis (head entropy, Table 13) and BLEU by source length, via the CLI."""
import json

import numpy as np

from interlingua.cli import main
from interlingua.evaluation.length_analysis import bucket_names, bucket_of
from interlingua.inference.embedder import Embedder


def test_attentions_are_distributions_over_each_sentence(trained_model):
    emb = Embedder(trained_model)
    sents = ["a dog runs on the grass .", "two men .", "", "a woman in a red dress is singing on a stage ."]
    atts = emb.attentions(sents, "en", batch_size=2)
    assert [a.shape[0] for a in atts] == [4] * 4 and atts[2].shape == (4, 0)
    for a in (atts[0], atts[1], atts[3]):
        assert np.allclose(a.sum(1), 1.0, atol=1e-5)
    one, pieces = emb.attention(sents[3], "en")
    assert one.shape[1] == len(pieces) and np.allclose(one, atts[3], atol=1e-6)  # batching does not change A


def test_analyze_heads_writes_table13_and_heat_maps(trained_model, multi30k_corpus, tmp_path, capsys):
    out = tmp_path / "heads"
    code = main(["analyze", "heads", "--model", f"with={trained_model}", "--model", f"again={trained_model}",
                 "--lang", "en", "--corpus", str(multi30k_corpus), "--split", "val", "--out", str(out)])
    assert code == 0
    report = json.loads((out / "heads.json").read_text())
    a, b = report["stats"]["with"], report["stats"]["again"]
    assert a == b and a["heads"] == 4 and a["sentences"] > 900
    assert a["up_to_length"]["count"] + a["beyond_length"]["count"] == a["all_heads"]["count"]
    assert 0.0 <= a["all_heads"]["mean"] <= np.log(40)
    assert "1.73 / 0.82" in (out / "heads.md").read_text()  # the paper's numbers beside ours
    for png in ("heads_with.png", "heads_again.png", "heads_all.png"):
        assert (out / png).stat().st_size > 1000


def test_length_buckets():
    assert bucket_names((10, 20, 30)) == ["1-10", "11-20", "21-30", "31+"]
    assert [bucket_of(n, (10, 20, 30)) for n in (1, 10, 11, 30, 31, 90)] == [0, 0, 1, 2, 3, 3]


def test_analyze_lengths_writes_table_and_plot(trained_model, multi30k_corpus, tmp_path, capsys):
    out = tmp_path / "len"
    code = main(["analyze", "lengths", "--model", str(trained_model), "--model", f"copy={trained_model}",
                 "--src", "en", "--tgt", "de", "--corpus", str(multi30k_corpus), "--split", "val", "--out", str(out)])
    assert code == 0
    result = json.loads((out / "length_buckets.json").read_text())
    assert sum(result["counts"]) == 1014 and result["buckets"][0] == "1-10"
    names = list(result["bleu"])
    assert len(names) == 2 and result["bleu"][names[0]] == result["bleu"]["copy"]
    assert (out / "length_buckets.png").stat().st_size > 1000


def test_analyze_heads_unknown_language_and_missing_sentences_get_one_error(trained_model, tmp_path, capsys):
    assert main(["analyze", "heads", "--model", str(trained_model), "--lang", "xx", "--out", str(tmp_path)]) != 0
    assert "no encoder for 'xx'" in capsys.readouterr().err
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert main(["analyze", "heads", "--model", str(trained_model), "--lang", "en", "-i", str(empty),
                 "--out", str(tmp_path)]) != 0
    assert "no 'en' sentences" in capsys.readouterr().err
