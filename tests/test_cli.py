"""The command line, end to end, including its error messages."""
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, tiny_config

from interlingua.cli import main


def run(argv, stdin="", capsys=None, monkeypatch=None):
    if monkeypatch is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8")), encoding="utf-8"))
    code = main(argv)
    out = capsys.readouterr() if capsys is not None else None
    return code, out


def test_train_translate_embed_evaluate_through_cli(multi30k_corpus, tmp_path, capsys, monkeypatch):
    import yaml
    cfg = tiny_config(multi30k_corpus, tmp_path / "run", train={"max_steps": 20, "valid_every": 10, "curves": True})
    cfg_path = tmp_path / "exp.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    code, out = run(["prepare", str(cfg_path)], capsys=capsys)
    assert code == 0 and "vocabularies" in out.out
    code, out = run(["train", str(cfg_path), "--set", "train.max_steps=12"], capsys=capsys)
    assert code == 0 and "trained 12 steps" in out.out
    code, out = run(["train", str(cfg_path), "--resume"], capsys=capsys)
    assert code == 0 and "trained 20 steps" in out.out
    ckpt = tmp_path / "run" / "best.pt"
    assert (tmp_path / "run" / "curves.png").stat().st_size > 1000

    assert [json.loads(line)["step"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
            if json.loads(line)["type"] == "valid"] == [10, 12, 20]  # resumed at 12, not restarted
    from interlingua.inference.api import load
    from interlingua.model_files.checkpoint import Checkpoint
    assert Checkpoint.read(tmp_path / "run" / "last.pt").training.step == 20

    code, out = run(["translate", "--model", str(ckpt), "--src", "en", "--tgt", "de", "--beam", "2"],
                    stdin="a dog runs .\n\ntwo men .\n", capsys=capsys, monkeypatch=monkeypatch)
    assert code == 0 and len(out.out.splitlines()) == 3 and out.out.splitlines()[1] == ""
    # the same translations as the library gives for these lines and settings
    assert out.out.splitlines() == load(ckpt).translate(["a dog runs .", "", "two men ."], "en", "de", beam=2)
    code, out = run(["translate", "--model", str(ckpt), "--src", "en", "--tgt", "de", "--beam", "3",
                     "--beam-stop", "top"],
                    stdin="a dog runs .\ntwo men .\n", capsys=capsys, monkeypatch=monkeypatch)
    assert code == 0
    assert out.out.splitlines() == load(ckpt).translate(["a dog runs .", "two men ."], "en", "de",
                                                        beam=3, beam_stop="top")

    (tmp_path / "in.txt").write_text("a dog .\na cat .\n")
    code, _ = run(["embed", "--model", str(ckpt), "--lang", "en", "-i", str(tmp_path / "in.txt"),
                   "-o", str(tmp_path / "v.npy")], capsys=capsys)
    vecs = np.load(tmp_path / "v.npy")
    assert code == 0 and vecs.shape == (2, 64)
    np.testing.assert_allclose(vecs, load(ckpt).encode(["a dog .", "a cat ."], "en"), atol=1e-6)
    assert not np.allclose(vecs[0], vecs[1])

    code, out = run(["evaluate", "bleu", "--model", str(ckpt), "--max-sentences", "30", "--out", str(tmp_path / "ev")],
                    capsys=capsys)
    assert code == 0 and "| **en** |" in out.out
    assert {p.name for p in (tmp_path / "ev").iterdir()} >= {"bleu_test_2016_flickr_beam1.md",
                                                             "bleu_test_2016_flickr_beam1.json",
                                                             "bleu_test_2016_flickr_beam1_bleu.png"}
    matrix = json.loads((tmp_path / "ev" / "bleu_test_2016_flickr_beam1.json").read_text())
    assert matrix["languages"] == ["de", "en"] and matrix["zero_shot"] == [] and list(matrix["bleu"]) == ["en"]
    # the en->de cells: lowercased sacreBLEU (13a) and chrF of the model's translations of the first 30 test lines
    from sacrebleu.metrics import BLEU, CHRF

    from interlingua.data.corpus import load_corpus, read_group
    test = read_group(load_corpus(multi30k_corpus).groups("test_2016_flickr")[0], limit=30)
    hyps = load(ckpt).translate(test["en"], "en", "de", beam=1)
    bleu = BLEU(lowercase=True, tokenize="13a").corpus_score(hyps, [test["de"]]).score
    chrf = CHRF(lowercase=True).corpus_score(hyps, [test["de"]]).score
    assert matrix["bleu"]["en"]["de"] == pytest.approx(bleu, abs=0.01)
    assert matrix["chrf"]["en"]["de"] == pytest.approx(chrf, abs=0.01) and chrf > 1.0  # chrF is not 0 even for 20 steps
    assert f"| **en** | {bleu:.2f} | - |" in out.out and f"| **en** | {chrf:.2f} | - |" in out.out
    code, out = run(["evaluate", "bleu", "--model", str(ckpt), "--max-sentences", "30", "--no-repeat-ngram", "1",
                     "--out", str(tmp_path / "ev")], capsys=capsys)
    blocked = json.loads((tmp_path / "ev" / "bleu_test_2016_flickr_beam1_norepeat1.json").read_text())
    hyps = load(ckpt).translate(test["en"], "en", "de", no_repeat_ngram=1)
    assert code == 0 and blocked["bleu"]["en"]["de"] == pytest.approx(
        BLEU(lowercase=True, tokenize="13a").corpus_score(hyps, [test["de"]]).score, abs=0.01)
    code, out = run(["attention", "--model", str(ckpt), "--lang", "en", "--output", str(tmp_path / "a.png"),
                     "a dog runs"], capsys=capsys)
    assert code == 0 and (tmp_path / "a.png").stat().st_size > 1000


@pytest.mark.parametrize("argv, needle", [
    (["translate", "--src", "xx", "--tgt", "de"], "no encoder for 'xx' (source languages: de, en)"),
    (["translate", "--src", "en", "--tgt", "fr"], "no decoder for 'fr' (target languages: de, en)"),
    (["embed", "--lang", "cs"], "no encoder for 'cs'"),
])
def test_unknown_language_lists_known_ones(trained_model, argv, needle, capsys, monkeypatch):
    argv = argv[:1] + ["--model", str(trained_model)] + argv[1:]
    code, out = run(argv, stdin="hallo\n", capsys=capsys, monkeypatch=monkeypatch)
    assert code == 2 and needle in out.err and "Traceback" not in out.err


def test_bad_inputs_give_one_clear_error(tmp_path, capsys):
    code, out = run(["translate", "--model", str(tmp_path / "none.pt"), "--src", "en", "--tgt", "de"], capsys=capsys)
    assert code == 2 and "checkpoint not found" in out.err
    (tmp_path / "c.yaml").write_text("corpus: x.yaml\nmodel: {bridge: {heds: 3}}\n")
    code, out = run(["train", str(tmp_path / "c.yaml")], capsys=capsys)
    assert code == 2 and "model.bridge.heds: unknown key" in out.err
    code, out = run(["data", "multi30k", "--dest", str(tmp_path / "d"), "--from", str(tmp_path / "nothing")],
                    capsys=capsys)
    assert code == 2 and "not found" in out.err


def test_console_script_is_installed():
    exe = REPO / ".venv" / "bin" / "interlingua"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "interlingua.cli"]
    res = subprocess.run(cmd + ["--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "translate" in res.stdout and "embed" in res.stdout


def test_demo_runs_end_to_end_small(multi30k_corpus, tmp_path, capsys, monkeypatch):
    """The demo finds Multi30k where `interlingua data multi30k` puts it (./data/multi30k) and runs through."""
    from interlingua import demo
    from interlingua.demo import run_demo
    # 20 dev lines, not 200: validating the untrained model (every output max_len long) was most of the run; the
    # subword models and the encoded corpus from 2,000 training lines, not 29,000 (3 steps read a few hundred)
    monkeypatch.setitem(demo.DEMO_CONFIG, "preprocess", {**demo.DEMO_CONFIG["preprocess"], "max_valid_sentences": 20,
                                                         "max_train_sentences": 2000})
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "multi30k").symlink_to(multi30k_corpus.parent, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("INTERLINGUA_DATA", raising=False)
    monkeypatch.setattr(demo, "SYNTHETIC_START", 0.0)  # made pairs from the first step, not the second half
    out = run_demo(Path("demo"), minutes=5, max_steps=3, test_sentences=12, precision="fp32")  # as the CLI's default
    text = capsys.readouterr().out
    config = json.loads((tmp_path / "demo" / "model" / "config.json").read_text())
    assert config["train"]["precision"] == "fp32"
    # the model names its corpus by an absolute path: `evaluate`, `shortlist` and the rest find it from any folder
    assert Path(config["corpus"]) == tmp_path.resolve() / "demo" / "multi30k" / "corpus.yaml"
    assert "(copied from data/multi30k)" in text
    assert "de->fr*" in text and "fr->de*" in text  # the zero-shot directions are shown and marked
    assert "== 5/5 sentence vectors" in text and "de->en:" in text and "ratio margin" in text
    assert set(out["retrieval"]) == set(out["retrieval_margin"]) and len(out["retrieval_margin"]) == 6
    assert set(out["bleu"]) == {"de", "en", "fr"} and out["steps"] == 3
    # zero-shot beside pivot, per direction, with the verdict
    assert "de->fr:" in text and "through en" in text and "verdict: zero-shot is" in text
    assert set(out["zero_shot_vs_pivot"]["directions"]) == {"de-fr", "fr-de"}
    # each difference with its paired bootstrap test (an untrained model's outputs: no difference beyond chance)
    assert all(0 < d["p_value"] <= 1 for d in out["zero_shot_vs_pivot"]["directions"].values())
    assert "chance)" in text and "beyond chance (paired bootstrap, p < 0.05)" in text
    assert "unrelated caption" in text
    # the demo trains cased and prints the BLEU that matches: cased, and no lowercased table beside it
    assert out["cased"] and "BLEU (cased)" in text and "BLEU (lowercased)" not in text
    assert out["zero_shot_vs_pivot"]["metric"] == "BLEU (cased)"
    records = [json.loads(line) for line in (tmp_path / "demo" / "model" / "metrics.jsonl").read_text().splitlines()]
    assert any("agreement" in r for r in records if r["type"] == "train")  # on by default
    # de<->fr pairs made through English (never a real de-fr pair), and the printout says so
    made = [r["synthetic_pairs"] for r in records if r["type"] == "train" and "synthetic_pairs" in r]
    assert made and set().union(*made) <= {"de->fr", "fr->de"} and sum(v for m in made for v in m.values()) > 0
    assert "de<->fr pairs made through English from minute 0" in text
    assert "trained on synthetic pairs made through English, never on a real de-fr pair" in text
    # it ends with what to do with the model, as commands to paste
    best = Path("demo") / "model" / "best.pt"
    assert f"== done: the model is {best}; to go on with it:" in text and best.is_file()
    assert f"interlingua translate --model {best} --src de --tgt fr" in text and f"serve --model {best}" in text
    assert f"interlingua.load('{best}')" in text


def test_demo_command_passes_its_options_on(tmp_path, monkeypatch):
    """`interlingua demo` hands its budget, data folder, test size and training precision to `run_demo`."""
    from interlingua import demo
    given = {}
    monkeypatch.setattr(demo, "run_demo", lambda work, **options: given.update(work=work, **options))
    assert main(["demo", "--work", str(tmp_path / "d"), "--minutes", "2", "--from", "m30k", "--max-sentences", "9",
                 "--precision", "bf16"]) == 0
    assert given == {"work": tmp_path / "d", "minutes": 2.0, "data_from": "m30k", "test_sentences": 9,
                     "precision": "bf16"}
    main(["demo", "--work", str(tmp_path / "d")])
    assert given["precision"] == "auto" and given["minutes"] == 8.0
    with pytest.raises(SystemExit):
        main(["demo", "--precision", "int8"])


def test_evaluate_sentence_suite_through_cli(trained_model, multi30k_corpus, tmp_path, capsys):
    """`evaluate retrieval` on the tiny checkpoint, its test set swapped for the 200 lines the model was trained on:
    a model that learned those translations finds them, the untrained reference does not."""
    import gzip

    from conftest import SHARED_DATA

    from interlingua.data.corpus import load_corpus, read_group
    if not (SHARED_DATA / "multi30k" / "train.en.gz").is_file():
        from conftest import missing
        missing("no shared data")
    root = tmp_path / "data"
    (root / "multi30k").mkdir(parents=True)
    lines = read_group(load_corpus(multi30k_corpus).groups("train")[0], limit=200)
    for lang in ("en", "de", "fr", "cs"):
        with gzip.open(root / "multi30k" / f"test_2016_flickr.{lang}.gz", "wt", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines[lang]))
        # bag of subwords
        (root / "multi30k" / f"train.{lang}.gz").symlink_to(SHARED_DATA / "multi30k" / f"train.{lang}.gz")
    code, out = run(["evaluate", "retrieval", "--model", str(trained_model), "--quick", "--data-root", str(root),
                     "--out", str(tmp_path / "ev")], capsys=capsys)
    assert code == 0, out.err
    text = (tmp_path / "ev" / "retrieval.md").read_text()
    assert "| source → target | model | untrained | bow-subword |" in text
    report = json.loads((tmp_path / "ev" / "retrieval.json").read_text())["results"]["Multi30k"]
    assert set(report) == {"model", "untrained", "bow-subword"}
    assert report["bow-subword"]["languages"] == ["en", "de", "fr", "cs"]
    methods = ("cosine", "margin", "centered", "centered_margin")
    model, untrained = report["model"], report["untrained"]
    for res in (model, untrained):
        assert res["n"] == 200 and res["languages"] == ["en", "de"] and res["missing_languages"] == ["fr", "cs"]
    cells = {name: [res[m][s][t] for m in methods for s, t in (("en", "de"), ("de", "en"))]
             for name, res in (("model", model), ("untrained", untrained))}
    # measured: the model 66-82% in every cell, the untrained reference 0-1% (chance: 0.5%)
    assert min(cells["model"]) > 40.0 and max(cells["untrained"]) < 5.0, cells
    bow = [v for m in methods for row in report["bow-subword"][m].values() for v in row.values()]
    assert len(bow) == 4 * 12 and max(bow) < 5.0  # one unaligned space per language: chance across languages
    assert f"| en → de | **{model['cosine']['en']['de']:.2f}** | {untrained['cosine']['en']['de']:.2f} |" in text


def test_evaluate_without_the_references_training_text_says_how_to_get_it(trained_model, tmp_path, capsys):
    root = tmp_path / "data"
    (root / "multi30k").mkdir(parents=True)
    code, out = run(["evaluate", "retrieval", "--model", str(trained_model), "--quick", "--data-root", str(root),
                     "--out", str(tmp_path / "ev")], capsys=capsys)
    errors = [line for line in out.err.splitlines() if line.startswith("error")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in out.err, out.err
    assert f"missing evaluation file {root / 'multi30k' / 'train.en.gz'}" in errors[0]
    assert f"interlingua data multi30k --dest {root / 'multi30k'}" in errors[0] and "--no-references" in errors[0]


def test_evaluate_passes_probing_dir_through(tmp_path, capsys, monkeypatch):
    import interlingua.evaluation.vectors as vectors
    from interlingua.evaluation.sentence.suites import SuiteResult
    seen = {}

    def fake(suite, checkpoint, data_root, out_dir, **kwargs):
        seen.update(suite=suite, **kwargs)
        (out_dir / f"{suite}.md").parent.mkdir(parents=True, exist_ok=True)
        (out_dir / f"{suite}.md").write_text("# report\n")
        return vectors.SentenceEvaluation(SuiteResult(suite, [], {}, total_elapsed_s=12.5), setup_elapsed_s=3.0)

    monkeypatch.setattr(vectors, "evaluate_sentence_vectors", fake)
    code, out = run(["evaluate", "probing", "--model", str(tmp_path / "x.pt"), "--data-root", str(tmp_path),
                     "--probing-dir", str(tmp_path / "probing"), "--out", str(tmp_path / "ev"), "--jobs", "3"],
                    capsys=capsys)
    assert code == 0, out.err
    assert seen["suite"] == "probing" and seen["probing_dir"] == tmp_path / "probing" and seen["jobs"] == 3
    assert "suite 12.5 s" in out.out


def test_scoring_another_corpus_keeps_the_files_of_the_models_own(trained_model, tmp_path, capsys):
    """`evaluate bleu --corpus OTHER --split val` wrote bleu_val_beam1.* over the model's own val results."""
    from conftest import write_multiway_corpus
    other = write_multiway_corpus(tmp_path, "other corpus", {"train": {"en": ["a dog ."], "de": ["ein hund ."]},
                                                               "val": {"en": ["a man rides a bike ."],
                                                                       "de": ["ein mann fährt rad ."]}})
    out = tmp_path / "ev"
    assert run(["evaluate", "bleu", "--model", str(trained_model), "--split", "val", "--max-sentences", "5",
                "--out", str(out)], capsys=capsys)[0] == 0
    own = (out / "bleu_val_beam1.json").read_bytes()
    code, captured = run(["evaluate", "bleu", "--model", str(trained_model), "--corpus", str(other), "--split", "val",
                          "--out", str(out)], capsys=capsys)
    assert code == 0, captured.err
    assert (out / "bleu_val_beam1.json").read_bytes() == own
    assert json.loads((out / "bleu_other-corpus_val_beam1.json").read_text())["split"] == "val"
