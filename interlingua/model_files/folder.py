"""Model folders: a trained model as plain files to ship, read without unpickling anything.

    OUT/
      config.json          the experiment config (model, preprocessing, ...), the languages and
                           directions, `vocab_offsets` where a language was added, the tokenizer
                           files per language, the format name and version, what the model
                           card reports (training step, dev and test BLEU as recorded), and
                           `sha256`: the SHA-256 of every other file
      model.safetensors    the weights; a tied weight (one tensor under two names) is stored once,
                           under its first name (config.json's `tied_weights` names the others)
      <lang>.spm.model     the sentencepiece model of each language the model reads or writes;
                           languages that share one (a joint vocabulary) share one file,
                           `joint.spm.model`
      README.md            the model card (`interlingua.model_files.card`)

Why: a `.pt` checkpoint is a pickle, and unpickling a file runs whatever it says; a folder of
JSON, safetensors and sentencepiece protos is data only, so a model can be handed to anyone.
`load_folder` never calls `torch.load`. A folder is written whole or not at all: into a temporary
sibling folder, flushed, then renamed into place. An existing OUT is replaced only when it is
empty or a previous export holding nothing but an export's files; anything else is refused, so
an export never deletes files it did not write.

A folder that is damaged or tampered with can still be readable: a dtype changed in the
safetensors header, NaN weights, another language's sentencepiece model under this one's name.
`load_folder` therefore checks each tensor's name, dtype and shape against the model config.json
builds, refuses non-finite weights, and verifies every file against the SHA-256 config.json
records; each failure is one `CheckpointError` naming the file (and the tensor). A folder exported
before checksums were recorded loads unverified, with a note.
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from interlingua.atomic_files import atomic_folder, check_replaceable
from interlingua.config import parse_config
from interlingua.data.vocab import EOS, Vocab, vocab_offsets, vocabs_from_protos
from interlingua.errors import CheckpointError, one_line
from interlingua.model_files.card import render_card
from interlingua.model_files.checkpoint import check_finite, check_format_version, finite_json
from interlingua.model_files.loaded import AddedLanguage, LoadedModel, Provenance, RecordedResults
from interlingua.modules.model import TranslationNetwork
from interlingua.records import read_validations

log = logging.getLogger(__name__)

FOLDER_FORMAT = "interlingua-model-folder"
FOLDER_VERSION = 1
"""The newest folder format this version reads (and the one it writes)."""
CONFIG = "config.json"
WEIGHTS = "model.safetensors"
CARD = "README.md"
CHECKSUMS = "sha256"
"""config.json's entry: file name -> SHA-256 (hex) of every other file of the folder."""
TOKENIZER_SUFFIX = ".spm.model"
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
_SHA256 = re.compile(r"[0-9a-f]{64}")


# -- writing ------------------------------------------------------------------------------------

def write_folder(loaded: LoadedModel, out: str | Path) -> Path:
    """Write `loaded` as a model folder at `out` (see the module's docstring); returns `out`."""
    out = Path(out)
    check_target(out)
    tensors, tied = stored_tensors(loaded.network)
    meta, protos = folder_config(loaded, tied)
    with atomic_folder(out) as tmp:
        save_file(tensors, tmp / WEIGHTS, metadata={"format": "pt"})
        for name, proto in protos.items():
            (tmp / name).write_bytes(proto)
        (tmp / CARD).write_text(render_card(meta), encoding="utf-8")
        meta[CHECKSUMS] = {p.name: sha256_file(p) for p in sorted(tmp.iterdir())}
        (tmp / CONFIG).write_text(json.dumps(meta, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    return out


def sha256_file(path: Path) -> str:
    """The SHA-256 of a file's bytes (hex), read in chunks: weights can be larger than memory allows twice."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def stored_tensors(network: torch.nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors model.safetensors holds, and the tied names left out (name -> the stored name it is).

    safetensors refuses tensors that share memory: a weight under two names (tied embeddings) is
    stored once, under its first name, and the model ties it again when it is built; a tensor that
    is only a view of another's memory is stored as a copy of its own."""
    tensors: dict[str, torch.Tensor] = {}
    tied: dict[str, str] = {}
    seen: dict[tuple[Any, ...], str] = {}
    storages: set[int] = set()
    for name, t in network.state_dict().items():
        ptr = t.untyped_storage().data_ptr()
        key = (ptr, t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)
        if t.numel() and key in seen:
            tied[name] = seen[key]
            continue
        seen[key] = name
        tensors[name] = t.detach().clone().contiguous() if t.numel() and ptr in storages else t.detach().contiguous()
        storages.add(ptr)
    return tensors, tied


def folder_config(loaded: LoadedModel, tied: dict[str, str]) -> tuple[dict[str, Any], dict[str, bytes]]:
    """config.json's content for `loaded` (`tied`: see `stored_tensors`), and the tokenizer files
    (name -> sentencepiece proto). A folder exported again keeps what its own export recorded."""
    model, prov = loaded.network, loaded.provenance
    from_folder = prov.kind == "folder"
    used = set(model.encoder_langs) | set(model.decoder_langs)  # a corpus's other languages are not shipped
    vocabs = {lang: v for lang, v in loaded.vocabs.items() if lang in used}
    files, protos = tokenizer_files(vocabs)
    offsets = vocab_offsets(vocabs)
    meta: dict[str, Any] = {
        "format": FOLDER_FORMAT,
        "version": FOLDER_VERSION,
        "config": loaded.config.model_dump(mode="json"),
        "encoder_langs": list(model.encoder_langs),
        "decoder_langs": list(model.decoder_langs),
        "directions": [list(d) for d in loaded.directions],
        **({"vocab_offsets": offsets} if offsets else {}),
        "tokenizers": files,
        "weights": WEIGHTS,
        **({"tied_weights": tied} if tied else {}),
        "parameters": sum(p.numel() for p in model.parameters()),
        "exported_from": prov.exported_from if from_folder else (prov.source.name if prov.source else None),
        **({"extended": [e.to_json() for e in prov.extended]} if prov.extended else {}),
        **({"averaged_from": list(prov.averaged_from)} if prov.averaged_from else {}),
        "record": (prov.recorded.to_json() if prov.recorded else {}) if from_folder else
        recorded_results(loaded).to_json(),
    }
    return json.loads(json.dumps(meta, allow_nan=False)), protos


def tokenizer_files(vocabs: dict[str, Vocab]) -> tuple[dict[str, str], dict[str, bytes]]:
    """Language -> file name, and file name -> sentencepiece proto: `<lang>.spm.model` for a model of
    one language, `joint.spm.model` for one several languages share (`joint-<first lang>` if there
    are more such); a language code that is no safe file name gets `lang-<n>.spm.model`."""
    groups: dict[bytes, list[str]] = {}
    for lang in sorted(vocabs):
        groups.setdefault(vocabs[lang].proto, []).append(lang)
    joint = sum(len(langs) > 1 for langs in groups.values())
    files: dict[str, str] = {}
    protos: dict[str, bytes] = {}
    for n, (proto, langs) in enumerate(groups.items()):
        if len(langs) > 1:
            stem = "joint" if joint == 1 else f"joint-{langs[0]}"
        else:
            stem = langs[0]
        name = stem + TOKENIZER_SUFFIX
        if not _SAFE_NAME.fullmatch(name) or name in protos:
            name = f"lang-{n}{TOKENIZER_SUFFIX}"
        protos[name] = proto
        files.update({lang: name for lang in langs})
    return files, protos


def recorded_results(loaded: LoadedModel) -> RecordedResults:
    """What the model card reports of a checkpoint's history, as recorded, never recomputed: its
    training summary (dev BLEU of its own step from the training state, else from metrics.jsonl
    beside it) and the test BLEU results in `eval/` beside it."""
    prov = loaded.provenance
    training = dict(prov.training) if prov.training else None
    source = prov.source if prov.source and prov.source.is_file() else None
    dev_from = "checkpoint" if training and training.get("dev") else None
    if training and not training.get("dev") and source is not None:
        training["dev"] = metrics_record(source.parent / "metrics.jsonl", training.get("step"))
        dev_from = "metrics.jsonl" if training["dev"] else None
    return RecordedResults(training, dev_from, tuple(test_results(source)) if source else ())


def metrics_record(path: Path, step: Any) -> dict[str, Any] | None:
    """The last validation record of `step` in a metrics.jsonl, as stored (None: no file, no step, no
    record; a log that cannot be read is warned about, not a reason to refuse the export)."""
    if not isinstance(step, int) or not path.is_file():
        return None
    try:
        found = [v for v in read_validations(path) if v.step == step]
    except (OSError, ValueError) as err:
        log.warning("left the dev BLEU of %s out of the model card: %s", path, err)
        return None
    return finite_json(found[-1].to_json()) if found else None


def test_results(checkpoint: Path) -> list[dict[str, Any]]:
    """The BLEU matrices in `eval/bleu_*.json` beside `checkpoint` that can be its own: written after
    it, and not titled with another checkpoint's name (`evaluate bleu` titles its report
    `<checkpoint> on <split>`)."""
    found = []
    written = checkpoint.stat().st_mtime
    for path in sorted((checkpoint.parent / "eval").glob("bleu_*.json")):
        md = path.with_suffix(".md")
        title = md.read_text(encoding="utf-8", errors="replace").partition("\n")[0] if md.is_file() else ""
        named = re.match(r"# (\S+\.pt) on ", title)
        if path.stat().st_mtime < written or (named and named.group(1) != checkpoint.name):
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            entry = {"file": f"eval/{path.name}", "split": str(data["split"]), "beam_size": data.get("beam_size"),
                     "pivot": data.get("pivot"), "signature": data.get("signature", ""), "bleu": data["bleu"],
                     "bleu_cased": data.get("bleu_cased") or {}, "zero_shot": data.get("zero_shot", [])}
            found.append(finite_json(entry))
        except (ValueError, KeyError, TypeError) as err:
            log.warning("left out %s from the model card: not a BLEU matrix (%s)", path, err)
    return found


def _previous_export(out: Path) -> set[str] | None:
    """The files a previous `export folder` wrote in `out` (from its config.json), or None where it is none."""
    try:
        meta = json.loads((out / CONFIG).read_text(encoding="utf-8"))
        if meta.get("format") != FOLDER_FORMAT:
            return None
        return {CONFIG, CARD, str(meta.get("weights", WEIGHTS)), *map(str, (meta.get("tokenizers") or {}).values())}
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def check_target(out: Path) -> None:
    """Refuse an `out` this export must not replace (`atomic_files.check_replaceable`)."""
    check_replaceable(out, _previous_export, "a model folder from `interlingua export folder`: give a new or "
                                             "empty folder (an export replaces only a previous export)")


# -- reading ------------------------------------------------------------------------------------

def load_folder(path: str | Path, device: torch.device | str = "cpu") -> LoadedModel:
    """Rebuild a model folder's model (eval mode, on `device`) and vocabularies from JSON, safetensors
    and sentencepiece files: nothing is unpickled. A missing or unreadable file is a
    `CheckpointError` that names it."""
    folder = Path(path)
    meta = read_folder_config(folder)
    where = folder / CONFIG
    cfg = parse_config(meta.get("config"), source=f"stored in {where}")
    try:
        enc, dec = [str(x) for x in meta["encoder_langs"]], [str(x) for x in meta["decoder_langs"]]
        directions = [(str(s), str(t)) for s, t in meta["directions"]]
        offsets = {str(k): int(v) for k, v in (meta.get("vocab_offsets") or {}).items()}
        files = {str(k): str(v) for k, v in meta["tokenizers"].items()}
        weights = str(meta.get("weights", WEIGHTS))
        provenance = folder_provenance(meta, folder)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise CheckpointError(f"{where} is incomplete or malformed (missing or mistyped: {err})") from None
    recorded = recorded_checksums(meta, folder)
    vocabs = vocabs_from_protos(read_tokenizers(folder, files, recorded), offsets)
    missing = sorted((set(enc) | set(dec)) - set(vocabs))
    if missing:
        raise CheckpointError(f"{where} names no tokenizer for {', '.join(missing)}")
    try:
        network = TranslationNetwork(cfg.model, {lang: len(v) for lang, v in vocabs.items()}, enc, dec)
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{where} does not describe a model this version builds: {err}") from None
    read_weights(network, folder / _plain_name(weights, where), recorded)
    for name in sorted(set(recorded or {}) - {weights, *files.values()}):  # the card: what load does not read
        path = folder / _plain_name(name, where)
        if not path.is_file():
            raise CheckpointError(f"{path} is missing (config.json records its SHA-256)")
        verify_checksum(path, recorded)
    network.restrict_to_vocabs(vocabs)
    network.to(device).eval()
    return LoadedModel(network, vocabs, cfg, directions, provenance)


def folder_provenance(meta: dict[str, Any], folder: Path) -> Provenance:
    """What config.json records of the weights: the training summary and results its card reports, the
    file it was exported from, the languages added and the checkpoints averaged."""
    stored = meta.get("record")
    recorded = RecordedResults.from_json(stored) if isinstance(stored, dict) and stored else None
    training = recorded.training if recorded else None
    step = training.get("step") if training else None
    return Provenance("folder", folder, step if isinstance(step, int) else None, training,
                      tuple(AddedLanguage.from_json(e) for e in meta.get("extended") or ()),
                      tuple(meta.get("averaged_from") or ()), meta.get("exported_from"), recorded)


def read_folder_config(folder: Path) -> dict[str, Any]:
    """config.json of a model folder, checked to be one this version reads."""
    where = folder / CONFIG
    hint = ""
    found = sorted(p.name for p in folder.glob("*.pt"))
    if found:
        hint = f"; for a training run's folder give one of its checkpoints ({folder / found[0]})"
    if not where.is_file():
        raise CheckpointError(f"{folder} is not a model folder: {CONFIG} is missing{hint}")
    try:
        meta = json.loads(where.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{where} is not readable JSON (truncated or corrupt?): {err}") from None
    if not isinstance(meta, dict) or meta.get("format") != FOLDER_FORMAT:
        raise CheckpointError(f"{where} is not the config of a model folder from `interlingua export folder`{hint}")
    check_format_version(meta.get("version"), FOLDER_VERSION, "model folder format", folder)
    return meta


def recorded_checksums(meta: dict[str, Any], folder: Path) -> dict[str, str] | None:
    """config.json's file name -> SHA-256; None (with a note) for a folder exported before they were recorded."""
    where = folder / CONFIG
    recorded = meta.get(CHECKSUMS)
    if recorded is None:
        log.info("%s records no SHA-256 of the folder's files (exported by an older interlingua): they are not "
                 "verified; `interlingua export folder %s NEW` writes a folder that records them", where, folder)
        return None
    if not isinstance(recorded, dict) or not all(isinstance(k, str) and isinstance(v, str) and _SHA256.fullmatch(v)
                                                 for k, v in recorded.items()):
        raise CheckpointError(f"{where} is malformed: '{CHECKSUMS}' must map file names to SHA-256 hex digests")
    return recorded


def verify_checksum(path: Path, recorded: dict[str, str] | None, data: bytes | None = None) -> None:
    """Refuse a file whose SHA-256 is not the one config.json records for it (`recorded`: None, nothing to
    verify). A file that is read but has no checksum while others have is refused too: config.json was edited
    to name it."""
    if recorded is None:
        return
    if path.name not in recorded:
        raise CheckpointError(f"{path.parent / CONFIG} records no SHA-256 for {path.name}, which it names: the "
                              f"folder was edited after export")
    found = hashlib.sha256(data).hexdigest() if data is not None else sha256_file(path)
    if found != recorded[path.name]:
        raise CheckpointError(f"{path} is not the file this folder was exported with: its SHA-256 differs from the "
                              f"one {CONFIG} records (changed or damaged since export)")


def read_tokenizers(folder: Path, files: dict[str, str], recorded: dict[str, str] | None = None) -> dict[str, bytes]:
    """Language -> sentencepiece proto, each file read once, checked to be a sentencepiece model and verified
    against its recorded SHA-256: another language's model is a readable sentencepiece model too."""
    protos: dict[str, bytes] = {}
    read: dict[str, bytes] = {}
    for lang, name in files.items():
        path = folder / _plain_name(name, folder / CONFIG)
        if name not in read:
            if not path.is_file():
                raise CheckpointError(f"{path} is missing: it is the sentencepiece model of '{lang}'")
            data = path.read_bytes()
            try:
                pieces = Vocab(data).sp.get_piece_size()
            except RuntimeError:
                pieces = 0
            if pieces <= EOS:
                raise CheckpointError(f"{path} is not a readable sentencepiece model (truncated or corrupt?)")
            verify_checksum(path, recorded, data)
            read[name] = data
        protos[lang] = read[name]
    return protos


def read_weights(network: TranslationNetwork, path: Path, recorded: dict[str, str] | None = None) -> None:
    """Load `path` (safetensors) into `network`; the names `stored_tensors` left out because they are a
    stored tensor under another name (tied weights) are filled by it, since the model ties them itself.
    Before anything is copied: every tensor's name, dtype and shape are the model's (`load_state_dict`
    would cast an int32 header's values silently), every value is finite, and the file's SHA-256 is
    the recorded one."""
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: it holds the model's weights")
    try:
        tensors = load_file(path)
    except Exception as err:  # safetensors raises its own error type, and others for odd files
        raise CheckpointError(f"{path} is not a readable safetensors file (truncated or corrupt?): "
                              f"{one_line(err, 200)}") from None
    state = network.state_dict()
    unexpected = [k for k in tensors if k not in state]
    stored = {state[k].untyped_storage().data_ptr() for k in tensors if k in state and state[k].numel()}
    missing = [k for k in state if k not in tensors
               and not (state[k].numel() and state[k].untyped_storage().data_ptr() in stored)]
    what = []
    if missing:
        what.append(f"lacks {len(missing)} weight(s) the model has ({', '.join(missing[:3])})")
    if unexpected:
        what.append(f"has {len(unexpected)} it does not ({', '.join(unexpected[:3])})")
    if what:
        raise CheckpointError(f"{path} does not match config.json: it {' and '.join(what)}")
    for name, tensor in tensors.items():
        want = state[name]
        if tensor.dtype != want.dtype or tensor.shape != want.shape:
            raise CheckpointError(f"{path} does not match config.json and the tokenizers: tensor '{name}' is stored as "
                                  f"{_described(tensor)}, the model they describe has {_described(want)}")
    check_finite(tensors, path)
    verify_checksum(path, recorded)
    try:
        network.load_state_dict(tensors, strict=False)
    except RuntimeError as err:
        raise CheckpointError(f"{path} does not match config.json and the tokenizers: {one_line(err)}") from None


def _described(tensor: torch.Tensor) -> str:
    """A tensor's dtype and shape, as messages give them: `float32 [400, 48]`."""
    return f"{str(tensor.dtype).removeprefix('torch.')} {list(tensor.shape)}"


def _plain_name(name: str, where: Path) -> str:
    """A file name config.json gives, refused where it would leave the folder."""
    if not name or name != Path(name).name or name in (".", ".."):
        raise CheckpointError(f"{where} names a file outside the folder: {name!r}")
    return name
