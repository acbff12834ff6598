"""Imports follow the data flow, one way:
data -> modules -> model_files -> training / inference -> evaluation -> serving -> cli.

Every module of `interlingua/` is parsed (nothing is imported) and each `interlingua.*` import,
inside functions too, must go to its own layer or a lower one. modules is the network alone;
model_files writes it to disk and reads it back. training and inference stand side by side and
import neither each other. config, errors, arguments, workers, figures, records, textio, atomic_files,
memory, precision, runtime, allocator and distributed are base utilities that every layer may import; they import
only each other.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "interlingua"

BASE = {"interlingua.config", "interlingua.errors", "interlingua.arguments", "interlingua.workers",
        "interlingua.figures", "interlingua.records", "interlingua.textio", "interlingua.atomic_files",
        "interlingua.memory", "interlingua.precision", "interlingua.cache", "interlingua.runtime",
        "interlingua.distributed", "interlingua.allocator"}
TOP = {"interlingua", "interlingua.cli", "interlingua.demo", "interlingua.experiment"}
RANK = {"base": 0, "data": 1, "modules": 2, "model_files": 3, "training": 4, "inference": 4, "evaluation": 5,
        "serving": 6, "top": 7}
SIDE_BY_SIDE = {("training", "inference"), ("inference", "training")}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> str:
    """The layer of an `interlingua` module, or of the package it names."""
    if module in BASE:
        return "base"
    if module in TOP:
        return "top"
    sub = module.split(".")[1]
    if sub in RANK:
        return sub
    raise AssertionError(f"{module} belongs to no layer: add it to tests/test_layers.py")


def allowed(src: str, dst: str) -> bool:
    if src == dst:
        return True
    if (src, dst) in SIDE_BY_SIDE:
        return False
    if dst == "base":
        return True
    if src == "base":
        return False
    return RANK[dst] < RANK[src]


def interlingua_imports(module: str, path: Path) -> list[tuple[int, str, str]]:
    """(line, imported module, the import as written) for every `interlingua.*` import in the file."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "interlingua" or alias.name.startswith("interlingua."):
                    found.append((node.lineno, alias.name, f"import {alias.name}"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            if base != "interlingua" and not base.startswith("interlingua."):
                continue
            written = f"from {'.' * node.level}{node.module or ''} import {', '.join(a.name for a in node.names)}"
            for alias in node.names:  # `from interlingua.x import y` imports the module x.y where there is one
                target = f"{base}.{alias.name}"
                found.append((node.lineno, target if target in MODULES else base, written))
    return list(dict.fromkeys(found))


def test_every_module_has_a_layer():
    assert MODULES, f"no modules found under {PACKAGE}"
    for module in MODULES:
        layer(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_one_way(module):
    path = MODULES[module]
    src = layer(module)
    wrong = [f"{path.relative_to(PACKAGE.parent)}:{line}: {written}  ({src} -> {layer(target)})"
             for line, target, written in interlingua_imports(module, path) if not allowed(src, layer(target))]
    assert not wrong, ("imports against the layers "
                       "(data -> modules -> model_files -> training / inference -> evaluation -> serving -> cli):\n"
                       + "\n".join(wrong))
