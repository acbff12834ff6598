"""What the machine refuses (disk space, a writable folder, memory) is one `error:` line naming the file or
the resource and the cause, exit 1, no traceback, and nothing the user had is lost. Full disks and read-only
folders are made in a private mount namespace (`in_private_mounts`); memory is limited for the one process."""
from __future__ import annotations

import resource
import subprocess
import sys

import yaml
from conftest import REPO, tiny_config
from test_decoding import random_checkpoint
from test_output_targets import CLI, in_private_mounts

from interlingua.cli import main

GIB = 1 << 30


def _one_error(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr
    return errors[0]


def _config(corpus, work, path, **sections):
    path.write_text(yaml.safe_dump(tiny_config(corpus, work, **sections)), encoding="utf-8")
    return path


def test_export_folder_on_a_full_disk(tmp_path):
    """A disk with room for one export, not for a second beside it: the new one fails, the old one stays."""
    model = random_checkpoint(tmp_path / "model.pt")
    probe = tmp_path / "probe"
    assert main(["export", "folder", str(model), str(probe)]) == 0
    size = sum(f.stat().st_size for f in probe.iterdir())
    small = tmp_path / "small"
    small.mkdir()
    out = small / "exported"
    done = in_private_mounts(f"""
mount -t tmpfs -o size={(size * 3 // 2 // 4096 + 4) * 4096} tmpfs {small}
{CLI} export folder {model} {out} >/dev/null
sha256sum {out}/* > {tmp_path}/before
{CLI} export folder {model} {out} || echo "exit $?"
ls -A {small}; sha256sum -c --quiet {tmp_path}/before && echo old-export-whole
""")
    assert done.returncode == 0, done.stderr
    error = _one_error(done.stderr)
    assert "no space left on device" in error and str(out) in error, error
    assert done.stdout.splitlines()[-3:] == ["exit 1", "exported", "old-export-whole"], done.stdout


def test_a_tensorboard_folder_that_is_not_writable(multi30k_corpus, tmp_path):
    work = tmp_path / "run"
    board = work / "tensorboard"
    board.mkdir(parents=True)
    cfg = _config(multi30k_corpus, work, tmp_path / "c.yaml",
                  train={"max_steps": 2, "valid_every": 2, "log_every": 1, "tensorboard": True})
    done = in_private_mounts(f"""
mount --bind {board} {board} && mount -o remount,bind,ro {board}
{CLI} train {cfg} || echo "exit $?"
""")
    assert done.returncode == 0, done.stderr
    error = _one_error(done.stderr)
    assert "exit 1" in done.stdout
    assert str(board) in error and "TensorBoard" in error and "Read-only file system" in error, error


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (8 * GIB, 8 * GIB))


def test_a_model_too_large_for_memory(multi30k_corpus, tmp_path):
    """An address-space limit of 8 GiB for the process: the allocation fails at once, nothing is touched."""
    cfg = _config(multi30k_corpus, tmp_path / "run", tmp_path / "c.yaml", train={"max_steps": 1})
    done = subprocess.run([sys.executable, "-m", "interlingua.cli", "train", str(cfg), "--set",
                           "model.embed_dim=1000000000"], capture_output=True, text=True, cwd=REPO,
                          preexec_fn=_limit_memory, timeout=300)
    assert done.returncode == 1, done.stderr
    error = _one_error(done.stderr)
    assert "not enough memory for" in error and "bytes" in error and "CPU memory" in error, error
    assert "model" in error


def test_data_preparation_on_a_full_disk(multi30k_corpus, tmp_path):
    work = tmp_path / "run"
    work.mkdir()
    cfg = _config(multi30k_corpus, work, tmp_path / "c.yaml", preprocess={"max_train_sentences": 3000})
    done = in_private_mounts(f"""
mount -t tmpfs -o size=64k tmpfs {work}
{CLI} prepare {cfg} || echo "exit $?"
ls -A {work}/data
""")
    assert done.returncode == 0, done.stderr
    error = _one_error(done.stderr)
    assert "exit 1" in done.stdout
    assert "no space left on device" in error and str(work / "data") in error, error
    assert "encoded.part" not in done.stdout  # the partial encoding is removed: the disk is not left full


def test_an_output_folder_that_is_not_writable_is_refused_before_translating(tmp_path):
    """`-o` in a read-only folder: refused by name before any sentence is translated, not after the work."""
    model = random_checkpoint(tmp_path / "model.pt")
    folder = tmp_path / "ro"
    folder.mkdir()
    source = tmp_path / "in.en"
    source.write_text("a man rides a bike .\n", encoding="utf-8")
    done = in_private_mounts(f"""
mount --bind {folder} {folder} && mount -o remount,bind,ro {folder}
{CLI} translate --model {model} --src en --tgt de -i {source} -o {folder}/out.de || echo "exit $?"
{CLI} export folder {model} {folder}/exported 2>{tmp_path}/export.err || echo "exit $?"
""")
    assert done.returncode == 0, done.stderr
    error = _one_error(done.stderr)
    assert error == f"error: {folder}: cannot be written into (read-only or not yours)"
    assert "en->de" not in done.stderr, done.stderr  # no progress bar: nothing was translated
    # an export names the folder, not the temporary folder it would have filled
    assert _one_error((tmp_path / "export.err").read_text()) == error
    assert done.stdout.split() == ["exit", "1", "exit", "1"], done.stdout


def test_an_output_under_a_file_names_the_path_without_python_notation(tmp_path, capsys):
    model = random_checkpoint(tmp_path / "model.pt")
    (tmp_path / "a_file").write_text("x", encoding="utf-8")
    source = tmp_path / "in.en"
    source.write_text("a man rides a bike .\n", encoding="utf-8")
    out = tmp_path / "a_file" / "out.de"
    assert main(["translate", "--model", str(model), "--src", "en", "--tgt", "de", "-i", str(source),
                 "-o", str(out)]) == 1
    assert _one_error(capsys.readouterr().err) == f"error: {out}: Not a directory"
