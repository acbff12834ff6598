import pytest

from interlingua.config import load_config, parse_config
from interlingua.errors import ConfigError


def test_unknown_key_names_its_path():
    with pytest.raises(ConfigError, match=r"model\.bridge\.head: unknown key"):
        parse_config({"corpus": "c.yaml", "model": {"bridge": {"head": 10}}})


def test_bad_value_names_key_and_reason():
    with pytest.raises(ConfigError, match=r"train\.optimizer: .*'sgd' or 'adam'"):
        parse_config({"corpus": "c.yaml", "train": {"optimizer": "rmsprop"}})
    with pytest.raises(ConfigError, match=r"model\.encoder\.hidden: .*even"):
        parse_config({"corpus": "c.yaml", "model": {"encoder": {"hidden": 511}}})
    with pytest.raises(ConfigError, match=r"directions: .*exactly one"):
        parse_config({"corpus": "c.yaml", "directions": {"mode": "bilingual"}})
    with pytest.raises(ConfigError, match=r"corpus: Field required"):
        parse_config({})


def test_yaml_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML") as err:
        load_config(bad)
    # one line, with where: PyYAML's own message quotes the source over several lines with a caret
    assert "\n" not in str(err.value) and "line 2, column 1" in str(err.value), str(err.value)
    assert "flow sequence at line 1, column 8" in str(err.value), str(err.value)
    tabs = tmp_path / "tabs.yaml"
    tabs.write_text("train:\n\tlr: 1\n")
    with pytest.raises(ConfigError, match=r"line 2, column 1: found character '\\t'"):
        load_config(tabs)


def test_an_override_that_is_not_yaml_is_one_error(tmp_path):
    f = tmp_path / "exp.yaml"
    f.write_text("corpus: data/corpus.yaml\n")
    with pytest.raises(ConfigError, match=r"override 'train.lr=\[1': the value is not valid YAML: line 1") as err:
        load_config(f, ["train.lr=[1"])
    assert "\n" not in str(err.value)


def test_overrides_and_relative_corpus(tmp_path):
    f = tmp_path / "exp.yaml"
    f.write_text("corpus: data/corpus.yaml\ntrain: {max_steps: 5}\n")
    cfg = load_config(f, ["train.max_steps=9", "model.bridge.heads=25", "directions.held_out=[[de, fr]]"])
    assert cfg.train.max_steps == 9 and cfg.model.bridge.heads == 25
    assert cfg.directions.held_out == [("de", "fr")]
    assert cfg.corpus == (tmp_path / "data" / "corpus.yaml").resolve()
    with pytest.raises(ConfigError, match="key.path=value"):
        load_config(f, ["nonsense"])


def test_a_dict_configs_relative_corpus_is_made_absolute_from_the_current_folder(tmp_path, monkeypatch):
    """A config built in Python (the demo's) keeps its corpus absolute, as a YAML file's does: a trained model's
    stored config finds the corpus from whatever folder a later command runs in."""
    monkeypatch.chdir(tmp_path)
    assert parse_config({"corpus": "data/corpus.yaml"}).corpus == tmp_path.resolve() / "data" / "corpus.yaml"
    assert parse_config({"corpus": str(tmp_path / "c.yaml")}).corpus == tmp_path / "c.yaml"  # absolute: as given


def test_shipped_recipes_are_valid():
    from pathlib import Path
    recipes = sorted((Path(__file__).resolve().parents[1] / "recipes").glob("*.yaml"))
    assert recipes
    for r in recipes:
        load_config(r)


def test_large_corpus_recipes_are_valid_and_state_their_compute():
    from pathlib import Path
    root = Path(__file__).resolve().parents[1] / "recipes"
    europarl, iwslt = sorted((root / "europarl").glob("*.yaml")), sorted((root / "iwslt17").glob("*.yaml"))
    assert len(europarl) == 32 and len(iwslt) == 5
    for r in europarl + iwslt:
        cfg = load_config(r)
        assert "# Expected compute:" in r.read_text()
        assert cfg.preprocess.clean.drop_long
    residual = load_config(root / "iwslt17" / "residual.yaml")
    assert residual.model.encoder.residual_drop_layer == 3 and residual.directions.mode == "pivot"
    assert load_config(root / "europarl" / "m2m_k50.yaml").model.bridge.heads == 50


def test_model_slots_are_kinds_chosen_by_type():
    cfg = parse_config({"corpus": "c.yaml", "model": {"decoder": {"hidden": 8}, "bridge": {"type": "none"}}})
    assert cfg.model.decoder.type == "lstm" and cfg.model.encoder.type == "bilstm" and cfg.model.bridge.type == "none"
    # a wrong key inside a kind's settings names the key's path, not pydantic's union tag
    with pytest.raises(ConfigError, match=r"model\.bridge\.hiden: unknown key"):
        parse_config({"corpus": "c.yaml", "model": {"bridge": {"type": "none", "hiden": 3}}})
    with pytest.raises(ConfigError, match=r"config <dict>: model\.decoder\.inputfeed: unknown key$"):
        parse_config({"corpus": "c.yaml", "model": {"decoder": {"inputfeed": True}}})
    with pytest.raises(ConfigError, match=r"model\.decoder: unknown type 'gru'; known types: 'lstm', 'transformer'"):
        parse_config({"corpus": "c.yaml", "model": {"decoder": {"type": "gru"}}})
    with pytest.raises(ConfigError, match=r"model\.bridge: expected a mapping"):
        parse_config({"corpus": "c.yaml", "model": {"bridge": 3}})


def test_kind_modules_is_stored_only_where_given():
    """Configs of built-in kinds dump (into checkpoints, config.json) exactly as before the key existed."""
    plain = parse_config({"corpus": "c.yaml"}).model_dump(mode="json")["model"]
    assert "kind_modules" not in plain and list(plain)[:2] == ["embed_dim", "encoder"]
    given = parse_config({"corpus": "c.yaml", "model": {"kind_modules": ["json"]}})
    assert given.model_dump(mode="json")["model"]["kind_modules"] == ["json"]
    assert parse_config(given.model_dump(mode="json")).model.kind_modules == ["json"]


def test_a_corpus_that_is_not_yaml_is_one_error(tmp_path):
    from interlingua.data.corpus import load_corpus
    from interlingua.errors import DataError
    bad = tmp_path / "corpus.yaml"
    bad.write_text("languages: [de\n")
    with pytest.raises(DataError, match=r"corpus .* is not valid YAML: line 2, column 1: ") as err:
        load_corpus(bad)
    assert "\n" not in str(err.value)
