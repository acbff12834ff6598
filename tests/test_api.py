"""The public API (`interlingua.load` -> `Model`): what the command line prints is what it returns."""
import ast
import inspect
import io
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO
from test_decoding import random_checkpoint

import interlingua
from interlingua.cli import main
from interlingua.errors import ConfigError, InterlinguaError, LanguageError
from interlingua.inference.api import Kinds, Model
from interlingua.model_files.checkpoint import read_checkpoint, save_atomic

SENTENCES = ["a dog runs in the park .", "", "the woman eats a small red ball .", "a child sits ."]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """en, de, fr with every module, trained (as far as the checkpoint says) on en<->de and en<->fr only,
    and carrying a training state, as a `last.pt` does."""
    path = random_checkpoint(tmp_path_factory.mktemp("api") / "model.pt", langs=("en", "de", "fr"))
    payload = read_checkpoint(path)
    payload["directions"] = [["de", "en"], ["en", "de"], ["en", "fr"], ["fr", "en"]]
    payload["training"] = {"step": 7, "optimizer": {"state": {0: {"exp_avg": torch.ones(1000)}}}}
    save_atomic(payload, path)
    return path


@pytest.fixture(scope="module")
def model(checkpoint):
    return interlingua.load(checkpoint)


def cli(argv, capsys, monkeypatch, stdin="", binary=False):
    raw = stdin.encode("utf-8")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8"))
    if binary:
        buf = io.BytesIO()
        monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(buf))
        code = main(argv)
        return code, buf.getvalue()
    code = main(argv)
    return code, capsys.readouterr()


def test_load_and_languages(model):
    assert isinstance(model, interlingua.Model)
    langs = model.languages
    assert langs.sources == ("de", "en", "fr") and langs.targets == ("de", "en", "fr")
    assert set(langs.trained) == {("de", "en"), ("en", "de"), ("en", "fr"), ("fr", "en")}
    assert langs.zero_shot == (("de", "fr"), ("fr", "de"))
    assert list(langs) == ["de", "en", "fr"] and "en" in langs and "xx" not in langs  # a sentence encoder's languages
    assert model.device == torch.device("cpu") and model.dim > 0 and model.heads is not None


def test_translate_equals_what_the_cli_prints(model, checkpoint, capsys, monkeypatch):
    for beam in (1, 3):
        code, out = cli(["translate", "--model", str(checkpoint), "--src", "en", "--tgt", "de", "--beam", str(beam),
                         "--max-len", "12"], capsys, monkeypatch, stdin="\n".join(SENTENCES) + "\n")
        assert code == 0
        assert out.out.splitlines() == model.translate(SENTENCES, "en", "de", beam=beam, max_len=12)
    assert model.translate(SENTENCES, "en", "de")[1] == ""


def test_pivot_is_two_translations(model, checkpoint, capsys, monkeypatch):
    mid = model.translate(SENTENCES, "de", "en", beam=2)
    assert model.translate(SENTENCES, "de", "fr", beam=2, pivot="en") == model.translate(mid, "en", "fr", beam=2)
    code, out = cli(["translate", "--model", str(checkpoint), "--src", "de", "--tgt", "fr", "--beam", "2",
                     "--pivot", "en"], capsys, monkeypatch, stdin="\n".join(SENTENCES) + "\n")
    assert code == 0 and out.out.splitlines() == model.translate(SENTENCES, "de", "fr", beam=2, pivot="en")


def test_encode_shape_dtype_and_the_cli_embed(model, checkpoint, capsys, monkeypatch, tmp_path):
    vecs = model.encode(SENTENCES, "en")
    assert vecs.shape == (4, model.dim) and vecs.dtype == np.float32
    assert not vecs[1].any() and vecs[0].any()  # the empty line: zeros
    heads = model.encode(SENTENCES, "en", pooling="heads")
    assert heads.shape == (4, model.heads, model.dim) and heads.dtype == np.float32
    np.testing.assert_allclose(heads.mean(1), vecs, atol=1e-5)
    for pooling, want in (("mean", vecs), ("heads", heads)):
        out = tmp_path / f"{pooling}.npy"
        code, _ = cli(["embed", "--model", str(checkpoint), "--lang", "en", "--pooling", pooling, "-o", str(out)],
                      capsys, monkeypatch, stdin="\n".join(SENTENCES) + "\n")
        assert code == 0
        np.testing.assert_array_equal(np.load(out), want)


def test_attention(model):
    one = model.attention_maps(["a dog runs ."], "en")[0]
    assert one.self_attention is None  # a BiLSTM encoder has none
    assert one.bridge.shape == (model.heads, len(one.tokens)) and np.allclose(one.bridge.sum(1), 1.0, atol=1e-5)
    many = model.attention_maps(["a dog runs .", ""], "en", self_attention=False)
    assert many[0].tokens == one.tokens and many[0].self_attention is None
    np.testing.assert_allclose(many[0].bridge, one.bridge, atol=1e-6)
    assert many[1].tokens == [] and many[1].bridge.shape == (model.heads, 0)


def test_unknown_languages_and_settings(model):
    with pytest.raises(LanguageError, match="no encoder for 'xx'"):
        model.translate(["a"], "xx", "de")
    with pytest.raises(LanguageError, match="no decoder for 'xx'"):
        model.translate(["a"], "en", "de", pivot="xx")
    with pytest.raises(ValueError, match="beam: must be >= 1, got 0"):
        model.translate(["a"], "en", "de", beam=0)
    with pytest.raises(InterlinguaError, match="pooling: invalid choice: 'max'"):
        model.encode(["a"], "en", pooling="max")


def test_no_training_state_is_kept(model, checkpoint):
    assert "training" in read_checkpoint(checkpoint)  # the file has one...
    assert model.step == 7  # ...of which the model keeps the step
    # ...and nothing else: no tensor reachable from the model but its network's parameters and buffers
    tensors, keys, seen, todo = 0, set(), set(), [model]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (torch.nn.Module, type)):
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            tensors += 1
        elif isinstance(obj, dict):
            keys |= {str(k) for k in obj}
            todo += obj.values()
        elif isinstance(obj, (list, tuple, set, frozenset)):
            todo += obj
        elif hasattr(obj, "__dict__"):
            todo += vars(obj).values()
    assert len(seen) > 10 and tensors == 0 and "exp_avg" not in keys  # the optimizer state's


def test_device_argument(checkpoint, capsys, monkeypatch):
    cpu = interlingua.load(checkpoint, device="cpu")
    assert cpu.device.type == "cpu"
    auto = interlingua.load(checkpoint, device="auto")
    assert auto.device.type == ("cuda" if torch.cuda.is_available() else auto.device.type)
    assert (auto.translate(SENTENCES[:1], "en", "de") == cpu.translate(SENTENCES[:1], "en", "de")
            or auto.device.type != "cpu")
    with pytest.raises(ConfigError, match="unknown device 'tpu'"):
        interlingua.load(checkpoint, device="tpu")
    code, out = cli(["translate", "--model", str(checkpoint), "--src", "en", "--tgt", "de", "--device", "tpu"],
                    capsys, monkeypatch, stdin="a dog .\n")
    assert code == 2 and "unknown device 'tpu'" in out.err


def test_untrained_like_keeps_the_architecture(model):
    fresh = model.untrained_like(seed=1)  # (the checkpoint itself is a seed-0 initialisation)
    assert fresh.languages == model.languages and fresh.dim == model.dim
    assert not np.allclose(fresh.encode(SENTENCES[:1], "en"), model.encode(SENTENCES[:1], "en"))
    np.testing.assert_array_equal(fresh.encode(SENTENCES[:1], "en"),
                                  model.untrained_like(seed=1).encode(SENTENCES[:1], "en"))


@pytest.mark.parametrize("beam", [1, 3])
def test_a_translation_does_not_depend_on_its_batch(model, beam):
    """An untrained model runs away to the length limit; the limit is the sentence's own (twice its
    source + 10 subwords), so a long batch-mate changes nothing."""
    short, long = "a dog .", " ".join(["the woman eats a small red ball"] * 4)
    alone = model.translate([short], "en", "de", beam=beam)
    together = model.translate([short, long], "en", "de", beam=beam, batch_size=2)
    assert together[0] == alone[0]
    assert len(model.vocabs["de"].tokenize(alone[0])) <= 2 * len(model.token_ids([short], "en")[0]) + 10 + 2


# --- what the model is, without reaching inside it --------------------------------------------------

def test_kinds_config_and_files(model, checkpoint):
    cfg = model.config
    assert model.kinds == Kinds(cfg.model.encoder.type, cfg.model.bridge.type, cfg.model.decoder.type)
    assert model.kinds == Kinds("bilstm", "attention", "lstm")
    assert model.path == checkpoint and model.step == 7
    fresh = model.untrained_like()
    assert (fresh.path, fresh.step, fresh.kinds) == (None, None, model.kinds)
    # copies: what a caller changes changes nothing in the model
    cfg.preprocess.max_len = 3
    model.preprocess.max_len = 3
    assert model.config.preprocess.max_len == model.preprocess.max_len != 3
    with pytest.raises(TypeError):
        model.vocabs["de"] = model.vocabs["en"]  # type: ignore[index]
    assert sorted(model.vocabs) == ["de", "en", "fr"]


def test_language_checks_name_the_problem(model):
    model.check_source("en"), model.check_target("fr")
    with pytest.raises(LanguageError, match=r"no encoder for 'xx' \(source languages: de, en, fr\)"):
        model.check_source("xx")
    with pytest.raises(LanguageError, match=r"no decoder for 'xx' \(target languages: de, en, fr\)"):
        model.check_target("xx")
    assert model.max_source_length("en") is None  # a BiLSTM reads any length
    with pytest.raises(LanguageError, match="no encoder for 'xx'"):
        model.max_source_length("xx")


def test_attention_check(model, tmp_path):
    model.check_attention()
    assert model.bridge_attention and model.self_attention_layers == 0
    plain = interlingua.load(random_checkpoint(tmp_path / "plain.pt", bridge={"type": "none"}))
    assert not plain.bridge_attention and plain.kinds.bridge == "none"
    with pytest.raises(InterlinguaError, match=r"shows no attention: its bridge \(none\) .* encoder \(bilstm\)"):
        plain.check_attention()
    with pytest.raises(LanguageError, match="no encoder for 'xx'"):  # the language is checked first, as before
        plain.attention_maps(["a"], "xx")
    with pytest.raises(InterlinguaError, match=r"has no attention bridge \(bridge: none\)"):  # asked for it alone
        plain.attention_maps(["a"], "en", self_attention=False)


def test_the_inside_is_private(model):
    """The network and the checkpoint as read have no public name; what the model is has read-only ones."""
    for name in ("model", "loaded", "pre", "network"):
        assert not hasattr(model, name), name
    for name in ("vocabs", "runtime", "config", "kinds", "preprocess"):
        with pytest.raises(AttributeError):
            setattr(model, name, None)


def model_private_names() -> set[str]:
    """`Model`'s private names: its own methods and properties (`Model.__dict__`) and the attributes its
    methods set on `self` (the network, the checkpoint as read, the engine, ...)."""
    names = {n for n in vars(Model) if n.startswith("_") and not n.startswith("__")}
    tree = ast.parse(textwrap.dedent(inspect.getsource(Model)))
    names |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
              and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name) and node.value.id == "self"}
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


PRIVATE = model_private_names()
ATTRIBUTE_CALLS = {"getattr", "setattr", "hasattr", "delattr"}


def private_model_uses(path: Path) -> list[str]:
    """Where a file reaches one of `Model`'s private names: `x._network`, `getattr(x, "_network")`,
    `monkeypatch.setattr(Model, "_load", ...)`; a class's use of its own (`self._x`) is its own business."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE and not (
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            found.append((node.lineno, node.attr))
        elif isinstance(node, ast.Call) and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) \
                and node.args[1].value in PRIVATE and (getattr(node.func, "id", None) in ATTRIBUTE_CALLS
                                                       or getattr(node.func, "attr", None) in ATTRIBUTE_CALLS):
            found.append((node.lineno, node.args[1].value))
    return [f"{path.relative_to(REPO)}:{line}: {name}" for line, name in sorted(found)]


def test_model_has_private_names_to_guard():
    assert {"_network", "_loaded", "_engine", "_load", "_bridged"} <= PRIVATE


def test_no_module_reaches_inside_model():
    """Evaluation, serving, the rest of inference, the command line and the benches use `Model`'s public API only."""
    package = REPO / "interlingua"
    files = [*package.glob("evaluation/**/*.py"), *package.glob("serving/**/*.py"), package / "cli.py",
             *(p for p in package.glob("inference/*.py") if p.name != "api.py"), *REPO.glob("bench/*.py"),
             *REPO.glob("scripts/**/*.py")]
    found = [use for p in files for use in private_model_uses(p)]
    assert not found, "\n".join(found)


def test_no_test_reaches_inside_model():
    """The tests see a `Model` as a user does: through its public names (a test of the network itself loads
    the network, `load_model(...).network`)."""
    found = [use for p in sorted((REPO / "tests").rglob("*.py")) for use in private_model_uses(p)]
    assert not found, f"{len(found)} uses of Model's private names:\n" + "\n".join(found)
