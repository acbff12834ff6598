"""An output never silently replaces one of its own command's inputs, nor a checkpoint a run resumes from
(its optimizer state would be gone): one error line, the file untouched; `--force` writes anyway."""
from __future__ import annotations

import shutil

import pytest
from test_decoding import random_checkpoint

from interlingua.cli import main
from interlingua.model_files.checkpoint import average_checkpoints, read_checkpoint


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    folder = tmp_path_factory.mktemp("guard")
    return [random_checkpoint(folder / f"{name}.pt", seed=seed) for seed, name in enumerate(("a", "b"))]


@pytest.fixture
def training_checkpoint(trained_model, tmp_path):
    """A copy of a run's last.pt: the file `train --resume` continues from."""
    copy = tmp_path / "last.pt"
    shutil.copyfile(trained_model.parent / "last.pt", copy)
    assert read_checkpoint(copy)["training"]["optimizer"]
    return copy


def _error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error")]


def test_average_refuses_to_overwrite_its_own_input(checkpoints, tmp_path, capsys):
    a = tmp_path / "a.pt"
    shutil.copyfile(checkpoints[0], a)
    before = a.read_bytes()
    assert main(["average", "--out", str(a), str(a), str(checkpoints[1])]) == 2
    err = capsys.readouterr().err
    assert _error_lines(err) == [f"error: --out {a} is also one of this command's inputs: give another file, "
                                 f"or --force to replace it"], err
    assert a.read_bytes() == before
    assert main(["average", "--force", "--out", str(a), str(a), str(checkpoints[1])]) == 0
    assert read_checkpoint(a)["averaged_from"] == [str(a), str(checkpoints[1])]


def test_the_same_file_by_another_name_is_still_the_input(checkpoints, tmp_path, capsys):
    link = tmp_path / "link.pt"
    link.symlink_to(checkpoints[0])
    assert main(["average", "--out", str(link), str(checkpoints[0]), str(checkpoints[1])]) == 2
    assert "is also one of this command's inputs" in capsys.readouterr().err


def _argv(command: str, model, out) -> list[str]:
    return {
        "average": ["average", "--out", str(out), str(model)],
        "extend": ["extend", str(model), "--lang", "fr", "--out", str(out)],
        "shortlist": ["shortlist", str(model), "--out", str(out)],
        "translate": ["translate", "--model", str(model), "--src", "en", "--tgt", "de", "-o", str(out)],
        "embed": ["embed", "--model", str(model), "--lang", "en", "-o", str(out)],
    }[command]


@pytest.mark.parametrize("command", ["average", "extend", "shortlist", "translate", "embed"])
def test_no_output_replaces_a_training_checkpoint(checkpoints, training_checkpoint, command, capsys):
    before = training_checkpoint.read_bytes()
    assert main(_argv(command, checkpoints[0], training_checkpoint)) == 2
    err = capsys.readouterr().err
    assert _error_lines(err) == [f"error: {training_checkpoint} is a training checkpoint (it holds the optimizer "
                                 f"state `train --resume` continues from): give another file, or --force to "
                                 f"replace it"], err
    assert training_checkpoint.read_bytes() == before


def test_force_replaces_a_training_checkpoint(checkpoints, training_checkpoint):
    assert main(["average", "--force", "--out", str(training_checkpoint), str(checkpoints[0])]) == 0
    assert "training" not in read_checkpoint(training_checkpoint)


def test_the_python_api_refuses_the_same(checkpoints, training_checkpoint):
    from interlingua.errors import InterlinguaError
    with pytest.raises(InterlinguaError, match="is a training checkpoint"):
        average_checkpoints([checkpoints[0]], training_checkpoint)
    average_checkpoints([checkpoints[0]], training_checkpoint, force=True)
