"""The command line, end to end, including its error messages."""
import io
import subprocess
import sys

import numpy as np
import pytest

from interlingua.cli import main

from conftest import REPO, tiny_config


def run(argv, stdin="", capsys=None, monkeypatch=None):
    if monkeypatch is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main(argv)
    out = capsys.readouterr() if capsys is not None else None
    return code, out


def test_train_translate_embed_evaluate_through_cli(multi30k_corpus, tmp_path, capsys, monkeypatch):
    import yaml
    cfg = tiny_config(multi30k_corpus, tmp_path / "run", train={"max_steps": 20, "valid_every": 10})
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

    code, out = run(["translate", "--model", str(ckpt), "--src", "en", "--tgt", "de", "--beam", "2"],
                    stdin="a dog runs .\n\ntwo men .\n", capsys=capsys, monkeypatch=monkeypatch)
    assert code == 0 and len(out.out.splitlines()) == 3 and out.out.splitlines()[1] == ""

    (tmp_path / "in.txt").write_text("a dog .\na cat .\n")
    code, _ = run(["embed", "--model", str(ckpt), "--lang", "en", "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "v.npy")], capsys=capsys)
    assert code == 0 and np.load(tmp_path / "v.npy").shape == (2, 64)

    code, out = run(["evaluate", "bleu", "--model", str(ckpt), "--max-sentences", "30", "--out", str(tmp_path / "ev")], capsys=capsys)
    assert code == 0 and "| **en** |" in out.out
    assert {p.name for p in (tmp_path / "ev").iterdir()} >= {"bleu_test_2016_flickr_beam1.md", "bleu_test_2016_flickr_beam1.json",
                                                             "bleu_test_2016_flickr_beam1_bleu.png"}
    code, out = run(["attention", "--model", str(ckpt), "--lang", "en", "--output", str(tmp_path / "a.png"), "a dog runs"], capsys=capsys)
    assert code == 0 and (tmp_path / "a.png").exists()


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
    code, out = run(["data", "multi30k", "--dest", str(tmp_path / "d"), "--from", str(tmp_path / "nothing")], capsys=capsys)
    assert code == 2 and "not found" in out.err


def test_console_script_is_installed():
    exe = REPO / ".venv" / "bin" / "interlingua"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "interlingua.cli"]
    res = subprocess.run(cmd + ["--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "translate" in res.stdout and "embed" in res.stdout


def test_demo_runs_end_to_end_small(multi30k_corpus, tmp_path, capsys):
    from interlingua.demo import run_demo
    out = run_demo(tmp_path / "demo", minutes=5, data_from=str(multi30k_corpus.parent), max_steps=3, test_sentences=30)
    text = capsys.readouterr().out
    assert "de->fr*" in text and "fr->de*" in text  # the zero-shot directions are shown and marked
    assert "== 5/5 sentence vectors" in text and "de->en:" in text
    assert set(out["bleu"]) == {"de", "en", "fr"} and out["steps"] == 3


def test_evaluate_sentence_suite_through_cli(trained_model, tmp_path, capsys):
    from conftest import SHARED_DATA
    if not (SHARED_DATA / "multi30k").is_dir():
        pytest.skip("no shared data")
    code, out = run(["evaluate", "retrieval", "--model", str(trained_model), "--quick", "--data-root", str(SHARED_DATA),
                     "--out", str(tmp_path / "ev")], capsys=capsys)
    assert code == 0, out.err
    text = (tmp_path / "ev" / "retrieval.md").read_text()
    assert "model" in text and "untrained" in text and "bow-subword" in text


def test_evaluate_passes_probing_dir_through(tmp_path, capsys, monkeypatch):
    import interlingua.evaluation.vectors as vectors
    seen = {}

    def fake(suite, checkpoint, data_root, out_dir, **kwargs):
        seen.update(suite=suite, **kwargs)
        (out_dir / f"{suite}.md").parent.mkdir(parents=True, exist_ok=True)
        (out_dir / f"{suite}.md").write_text("# report\n")
        return {"total_elapsed_s": 12.5, "setup_elapsed_s": 3.0}

    monkeypatch.setattr(vectors, "evaluate_sentence_vectors", fake)
    code, out = run(["evaluate", "probing", "--model", str(tmp_path / "x.pt"), "--data-root", str(tmp_path),
                     "--probing-dir", str(tmp_path / "probing"), "--out", str(tmp_path / "ev"), "--jobs", "3"], capsys=capsys)
    assert code == 0, out.err
    assert seen["suite"] == "probing" and seen["probing_dir"] == tmp_path / "probing" and seen["jobs"] == 3
    assert "suite 12.5 s" in out.out
