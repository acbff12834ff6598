"""What is on disk stays in `interlingua.model_files`: no other module reads a checkpoint or a model folder
itself, or looks into what one holds by key; they read `LoadedModel`, `Provenance` and `Checkpoint` fields.

The modules are parsed (nothing is imported), like tests/test_layers.py does. Also here: the kinds'
discovery (every config validation) imports the network only, never the file code.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_layers import MODULES, PACKAGE

from interlingua.model_files.checkpoint import Checkpoint, TrainingState, read_checkpoint
from interlingua.model_files.export import export_folder
from interlingua.model_files.load import load_model
from interlingua.model_files.loaded import AddedLanguage, Provenance
from interlingua.records import Validation

FILES_PACKAGE = "interlingua.model_files"

RAW_ACCESS = {"read_checkpoint", "build_payload", "from_payload", "to_payload", "payload", "payload_path"}
"""Names that hand out a file's content as stored (a dict), or did before it was typed."""

STORED_KEYS = {"encoder_langs", "decoder_langs", "vocab_offsets", "extended", "averaged_from", "exported_from",
               "tied_weights", "tokenizers", "dev_from", "torch_rng", "grad_scaler", "log_window", "lr_scheduler",
               "weights_sha256"}
"""Keys of a checkpoint, a model folder's config.json or a CTranslate2 export's interlingua.json that no
other data of the package has: read by key, they mean the file's dict is being looked into."""


def raw_file_access(path: Path) -> list[str]:
    """`line: what` for each place in the file that loads or looks into a model file's stored content."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Attribute):
            if node.attr == "load" and isinstance(node.value, ast.Name) and node.value.id == "torch":
                found.append(f"{line}: torch.load")
            elif node.attr in RAW_ACCESS:
                found.append(f"{line}: .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in RAW_ACCESS:
            found.append(f"{line}: {node.id}")
        elif isinstance(node, ast.ImportFrom):
            names = {a.name for a in node.names}
            if node.module == "torch" and "load" in names:
                found.append(f"{line}: from torch import load")
            found += [f"{line}: import {name}" for name in sorted(names & RAW_ACCESS)]
        elif isinstance(node, ast.Subscript) and _stored_key(node.slice):
            found.append(f"{line}: [{_stored_key(node.slice)!r}]")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "pop")
              and node.args and _stored_key(node.args[0])):
            found.append(f"{line}: .{node.func.attr}({_stored_key(node.args[0])!r})")
    return sorted(set(found), key=lambda s: (int(s.partition(":")[0]), s))


def _stored_key(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and node.value in STORED_KEYS else None


OUTSIDE = sorted(m for m in MODULES if m != FILES_PACKAGE and not m.startswith(FILES_PACKAGE + "."))


def test_the_file_package_exists():
    assert any(m.startswith(FILES_PACKAGE + ".") for m in MODULES) and OUTSIDE


@pytest.mark.parametrize("module", OUTSIDE)
def test_no_module_outside_model_files_reads_a_model_file_itself(module):
    path = MODULES[module]
    found = raw_file_access(path)
    assert not found, (f"{path.relative_to(PACKAGE.parent)} reads a model file's stored content itself; read it "
                       f"through interlingua.model_files (LoadedModel / Provenance / Checkpoint fields):\n"
                       + "\n".join(found))


def test_the_guard_sees_what_it_looks_for(tmp_path):
    """Each way of reaching into a file is reported (so that a clean result above means something)."""
    probe = tmp_path / "probe.py"
    probe.write_text("import torch\n"
                     "from interlingua.model_files.checkpoint import read_checkpoint\n"
                     "state = torch.load('x.pt')\n"
                     "added = loaded.payload.get('extended', [])\n"
                     "langs = meta['encoder_langs']\n"
                     "where = loaded.payload_path\n", encoding="utf-8")
    assert raw_file_access(probe) == ["2: import read_checkpoint", "3: torch.load", "4: .get('extended')",
                                      "4: .payload", "5: ['encoder_langs']", "6: .payload_path"]


def test_validating_a_config_imports_no_file_code():
    """`config.discover_kinds` imports every module of `interlingua.modules` (their kinds register): none of
    them brings in code that reads or writes model files (checkpoints, folders, cards), nor training or
    the corpus preparation `interlingua extend` reads its text with."""
    script = ("import sys\n"
              "from interlingua.config import parse_config\n"
              "cfg = parse_config({'corpus': 'corpus.yaml', 'model': {'encoder': {'type': 'transformer'}}})\n"
              "assert cfg.model.encoder.type == 'transformer'\n"
              "print(' '.join(sorted(m for m in sys.modules if m.startswith('interlingua.'))))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=PACKAGE.parent, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    imported = done.stdout.split()
    assert "interlingua.modules.transformer" in imported  # the kinds were discovered
    unwanted = (FILES_PACKAGE, "interlingua.training", "interlingua.data.prepare")
    assert not [m for m in imported if m.startswith(unwanted)]
    assert not [m for m in imported if m in MODULES and raw_file_access(MODULES[m])]


LEGACY = Path(__file__).resolve().parent / "fixtures" / "legacy_attention.pt"


def test_what_a_file_records_reads_as_fields_and_is_stored_as_before(tmp_path):
    """A checkpoint's history (training summary, languages added, checkpoints averaged) reaches the loaded
    model's `Provenance`, is stored under the same keys in the same shape as before it was typed, and passes
    through a model folder unchanged."""
    ckpt = Checkpoint.read(LEGACY)
    added = AddedLanguage(lang="xx", source="base.pt", vocab_size=60, noise=0.01, seed=3)
    ckpt.extended, ckpt.averaged_from = [added], ["a.pt", "b.pt"]
    ckpt.training = TrainingState(step=5, max_steps=9, history=[Validation(step=5, mean_bleu=1.0)])
    ckpt.save(tmp_path / "c.pt")
    stored = read_checkpoint(tmp_path / "c.pt")
    assert stored["extended"] == [{"lang": "xx", "from": "base.pt", "vocab_size": 60, "noise": 0.01, "seed": 3}]
    assert stored["averaged_from"] == ["a.pt", "b.pt"] and stored["version"] == 1

    from_pt = load_model(tmp_path / "c.pt").provenance
    assert from_pt == Provenance("checkpoint", tmp_path / "c.pt", 5, ckpt.training.summary(), (added,),
                                 ("a.pt", "b.pt"))

    folder = export_folder(tmp_path / "c.pt", tmp_path / "folder")
    meta = json.loads((folder / "config.json").read_text())
    assert (meta["extended"], meta["averaged_from"]) == (stored["extended"], stored["averaged_from"])
    assert meta["exported_from"] == "c.pt" and meta["record"]["training"]["step"] == 5
    from_folder = load_model(folder).provenance
    assert (from_folder.kind, from_folder.source, from_folder.step, from_folder.exported_from) == \
        ("folder", folder, 5, "c.pt")
    assert (from_folder.extended, from_folder.averaged_from) == (from_pt.extended, from_pt.averaged_from)
    assert from_folder.recorded is not None and from_folder.recorded.to_json() == meta["record"]
    assert from_folder.training == meta["record"]["training"]
    again = export_folder(folder, tmp_path / "again")
    assert (again / "config.json").read_bytes() == (folder / "config.json").read_bytes()
