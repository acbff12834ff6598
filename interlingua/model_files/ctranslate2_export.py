"""`interlingua export ctranslate2 MODEL OUT`: a shared Transformer model as a CTranslate2 model folder.

    OUT/
      model.bin, config.json,    the CTranslate2 model, written by the ctranslate2 package's own
      shared_vocabulary.json     converter (`ctranslate2.converters.Converter`) from a
                                 `TransformerSpec` this module fills with our weights
      <name>.spm.model           the sentencepiece model (our vocabulary: CTranslate2's ids are ours)
      interlingua.json           what was exported: languages, tag position, preprocessing, tokenizer,
                                 quantization (and what marks OUT as this kind of export)
      README.md                  how to call it from Python (ctranslate2 + sentencepiece)

Only what CTranslate2's Transformer computes exactly is exported: a shared model (`model.shared:
true`: one vocabulary, one encoder and one decoder for every language) with encoder and decoder kind
`transformer`, `bridge: none`, embeddings of the model's width (`embed_dim` equal to `hidden`), no
`residual_drop_layer`, no `position_query` and no decoder `language_embedding`; pre- or post-norm,
sinusoidal or learned positions, tied or untied output embeddings (`variational_dropout` only acts in
training). Anything else is one `UnsupportedModelError` naming what CTranslate2 lacks.

How our model maps onto the spec (verified against `interlingua.modules.transformer`):

- self-attention: our `q_proj` and fused `kv_proj` (keys, then values) are CTranslate2's fused
  QKV `linear[0]` (rows q, k, v), `out_proj` is `linear[1]`; cross-attention: `q_proj` is
  `linear[0]`, `kv_proj` the fused KV `linear[1]`, `out_proj` `linear[2]`;
- each layer's norms: `norms[0]` the self-attention's, (decoder) `norms[1]` the cross-attention's,
  the last the feed-forward's; pre-norm's final LayerNorm is the spec's `layer_norm`, post-norm has
  none (CTranslate2 computes LN(x + F(x)) with `pre_norm: false`, as we do);
- the feed-forward is Linear, ReLU, Linear; the output layer is `generator` with its bias (tied
  embeddings are written twice; CTranslate2's converter stores them once as an alias);
- token embeddings are scaled by sqrt(embed_dim) (`scale_embeddings`, set to that number);
- position encodings are set explicitly: ours are interleaved (sin, cos, sin, cos, ... per
  frequency, `transformer.sinusoids`), CTranslate2's built-in table is concatenated (all sines,
  then all cosines), so the spec gets our table: positions 0 .. N-1 with N = `max(1024,
  4 * preprocess.max_len + 2)` for sinusoidal positions, the learned table itself otherwise; a
  longer input or output is CTranslate2's error "No position encodings are defined for positions >= N";
- LayerNorm epsilon: ours is PyTorch's 1e-5 (read from the modules); the config's
  `layer_norm_epsilon` is set to it, which CTranslate2 4.x reads (4.8 falls back to 1e-5 for a
  LayerNorm with a bias where a config has none; 1e-6 instead would move the test models'
  log-probabilities by up to 1.5e-5, against ~3e-6 of float32 noise with the right value);
- the vocabulary lists are our ids in order (`Vocab.id_to_piece`); unk, bos and eos are our
  pieces of ids 1, 2, 3; no BOS or EOS is added to the source (ours has neither).

The target language: with `model.tag_position: decoder_start` the decoder's first input is the
`<2xx>` tag in place of BOS, so the config's `decoder_start_token` is None (null) and the tag is
the first (only) token of `target_prefix`: CTranslate2 then starts the decoder with it and leaves
it out of the hypothesis. With `tag_position: source_prefix` the source starts with the tag and the
decoder with BOS (`decoder_start_token` is our `<s>`): the caller puts `<2xx>` before the source
pieces. Greedy search (`beam_size=1`, `min_decoding_length=0` since ours may end at once,
`max_decoding_length` = our `max_len`) gives our greedy output token for token (float32 weights;
tests/test_export_ctranslate2.py checks it). CTranslate2's beam search is not ours (it stops a
sentence as our `beam_stop: top` does), so beam outputs may differ.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from interlingua.atomic_files import atomic_folder, check_replaceable
from interlingua.config import ModelConfig
from interlingua.data.vocab import BOS, EOS, UNK, Vocab, language_tag
from interlingua.errors import ConfigError, InterlinguaError
from interlingua.model_files.folder import tokenizer_files
from interlingua.model_files.loaded import LoadedModel
from interlingua.modules.model import SHARED
from interlingua.modules.transformer import (
    DecoderLayer,
    EncoderLayer,
    MultiHeadAttention,
    TransformerDecoder,
    TransformerDecoderConfig,
    TransformerEncoder,
    TransformerEncoderConfig,
    sinusoids,
)

if TYPE_CHECKING:
    from ctranslate2.specs.transformer_spec import TransformerSpec

EXPORT_FORMAT = "interlingua-ctranslate2"
EXPORT_VERSION = 1
MARKER = "interlingua.json"
CARD = "README.md"
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16",
                 "float32")
"""The weight types CTranslate2 4.x's converter takes (`ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES`);
None (or "none") keeps our float32 weights."""
MIN_POSITIONS = 1024
"""At least this many sinusoidal positions are written (CTranslate2's default max_input_length)."""
INSTALL_HINT = "pip install 'interlingua[ctranslate2]'"
WEIGHTS_SHA256 = "weights_sha256"
"""interlingua.json's entry where an export cached beside its model records the weights' SHA-256."""


class UnsupportedModelError(ConfigError):
    """The model uses something CTranslate2's Transformer cannot compute exactly."""


# -- what can be exported -------------------------------------------------------------------------

_BRIDGE_NAMES = {"attention": "the attention bridge", "ntdv": "NTDV, the document-vector bridge"}


def unsupported_features(cfg: ModelConfig, vocabs: dict[str, Vocab] | None = None) -> list[str]:
    """What in `cfg` (and the vocabularies) CTranslate2's Transformer lacks, one phrase each; empty: exportable."""
    problems = []
    if not cfg.shared:
        problems.append("a per-language model (model.shared: false, one encoder and one decoder per language): "
                        "CTranslate2 runs one encoder and one decoder over one vocabulary; only shared models "
                        "(model.shared: true) export")
    enc, dec, bridge = cfg.encoder, cfg.decoder, cfg.bridge
    if enc.type != "transformer":
        problems.append(f"encoder kind '{enc.type}': CTranslate2's Transformer has no such encoder "
                        f"(only kind 'transformer' exports)")
    if bridge.type != "none":
        name = _BRIDGE_NAMES.get(bridge.type, f"kind '{bridge.type}'")
        problems.append(f"bridge '{bridge.type}' ({name}): CTranslate2's Transformer has no such layer between "
                        f"encoder and decoder (only bridge 'none' exports)")
    if dec.type != "transformer":
        problems.append(f"decoder kind '{dec.type}': CTranslate2's Transformer has no such decoder "
                        f"(only kind 'transformer' exports)")
    if enc.type == "transformer":
        drop = getattr(enc, "residual_drop_layer", None)
        if drop is not None:
            problems.append(f"encoder.residual_drop_layer {drop} (a self-attention sub-layer without its residual "
                            f"connection): CTranslate2's Transformer layers always keep it")
        if getattr(enc, "position_query", False):
            problems.append("encoder.position_query (self-attention queries from position encodings alone): "
                            "CTranslate2's self-attention computes its queries from the layer input")
    language_embedding = getattr(dec, "language_embedding", "none")
    if dec.type == "transformer" and language_embedding != "none":
        problems.append(f"decoder.language_embedding {language_embedding} (a target-language "
                        f"embedding concatenated to every decoder input and projected back): CTranslate2's "
                        f"Transformer decoder has no language embedding")
    for side, slot in (("encoder", enc), ("decoder", dec)):
        hidden = getattr(slot, "hidden", None)
        if slot.type == "transformer" and hidden is not None and hidden != cfg.embed_dim:
            problems.append(f"{side} embeddings projected from embed_dim {cfg.embed_dim} to the {side}'s width "
                            f"{hidden} ({side}.hidden): CTranslate2's Transformer has no projection after its "
                            f"embeddings")
    if vocabs and cfg.shared:
        if any(v.offset for v in vocabs.values()):
            problems.append("a language added with `interlingua extend` (several sentencepiece models in one id "
                            "space, each target restricted to its own ids): CTranslate2 has one vocabulary of "
                            "distinct tokens and no per-language output restriction")
        elif len({v.proto for v in vocabs.values()}) > 1:
            problems.append("several sentencepiece models for one shared id space: CTranslate2 has one vocabulary")
    return problems


def check_exportable(loaded: LoadedModel) -> None:
    """Raise `UnsupportedModelError` (one line naming every feature CTranslate2 lacks) unless `loaded`
    exports exactly; also checks that the modules are the kinds the config names."""
    problems = unsupported_features(loaded.config.model, _used_vocabs(loaded))
    if not problems:
        net = loaded.network
        enc, dec = net.encoders[SHARED], net.decoders[SHARED]
        if not isinstance(enc, TransformerEncoder) or not isinstance(dec, TransformerDecoder):
            problems.append(f"modules of classes {type(enc).__name__} and {type(dec).__name__}: only interlingua's "
                            f"own Transformer encoder and decoder export")
    if problems:
        raise UnsupportedModelError("cannot export this model to CTranslate2: " + "; ".join(problems))


def _used_vocabs(loaded: LoadedModel) -> dict[str, Vocab]:
    used = set(loaded.network.encoder_langs) | set(loaded.network.decoder_langs)
    return {lang: v for lang, v in loaded.vocabs.items() if lang in used}


# -- the spec ----------------------------------------------------------------------------------------

def _array(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).contiguous().numpy()


def _set_linear(spec: Any, linear: nn.Linear) -> None:
    spec.weight = _array(linear.weight)
    if linear.bias is not None:
        spec.bias = _array(linear.bias)


def _set_fused(spec: Any, *linears: nn.Linear) -> None:
    """One linear whose output is the given linears' outputs one after the other (they all have biases)."""
    spec.weight = _array(torch.cat([lin.weight for lin in linears]))
    spec.bias = _array(torch.cat([lin.bias for lin in linears]))


def _set_norm(spec: Any, norm: nn.Module) -> None:
    assert isinstance(norm, nn.LayerNorm)
    spec.gamma = _array(norm.weight)
    spec.beta = _array(norm.bias)


def _set_ffn(spec: Any, layer: EncoderLayer | DecoderLayer, norm: int) -> None:
    _set_norm(spec.layer_norm, layer.norms[norm])
    first, act, _drop, second = layer.ff
    assert isinstance(first, nn.Linear) and isinstance(act, nn.ReLU) and isinstance(second, nn.Linear)
    _set_linear(spec.linear_0, first)
    _set_linear(spec.linear_1, second)


def _self_attention(spec: Any, attn: MultiHeadAttention) -> None:
    _set_fused(spec.linear[0], attn.q_proj, attn.kv_proj)  # q, then kv_proj's keys and values
    _set_linear(spec.linear[1], attn.out_proj)


def position_table(module: TransformerEncoder | TransformerDecoder, rows: int) -> np.ndarray:
    """The positions the module's embedding layer adds, (rows, d_model): its learned table, or our
    interleaved sinusoids of positions 0 .. rows-1."""
    table = module.embedding.table
    if table is not None:
        return _array(table.weight)
    return _array(sinusoids(torch.arange(rows), module.embedding.dim))


def _set_inputs(spec: Any, module: TransformerEncoder | TransformerDecoder, rows: int) -> None:
    embedding = module.embedding
    assert embedding.proj is None  # embed_dim == d_model (`unsupported_features`)
    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embeddings.weight = _array(embedding.embed.weight)
    spec.scale_embeddings = float(embedding.scale)  # sqrt(embed_dim), which is sqrt(d_model) here
    spec.position_encodings.encodings = position_table(module, rows)


def sinusoidal_rows(loaded: LoadedModel) -> int:
    """How many sinusoidal positions are written: enough for our longest input and output limit."""
    return max(MIN_POSITIONS, 4 * loaded.config.preprocess.max_len + 2)


def layer_norm_epsilon(network: nn.Module) -> float:
    """The epsilon every LayerNorm of `network` uses (one value; they are all PyTorch's default)."""
    eps = {m.eps for m in network.modules() if isinstance(m, nn.LayerNorm)}
    if len(eps) > 1:
        raise UnsupportedModelError(f"LayerNorms with different epsilons {sorted(eps)}: CTranslate2 uses one")
    return float(eps.pop()) if eps else 1e-5


def build_spec(loaded: LoadedModel) -> TransformerSpec:
    """The filled CTranslate2 `TransformerSpec` of an exportable model (see `check_exportable`)."""
    from ctranslate2.specs import common_spec, transformer_spec

    check_exportable(loaded)
    cfg = loaded.config.model
    net = loaded.network
    enc, dec = net.encoders[SHARED], net.decoders[SHARED]
    assert isinstance(enc, TransformerEncoder) and isinstance(dec, TransformerDecoder)
    ecfg, dcfg = cfg.encoder, cfg.decoder
    assert isinstance(ecfg, TransformerEncoderConfig) and isinstance(dcfg, TransformerDecoderConfig)
    enc_spec = transformer_spec.TransformerEncoderSpec(
        len(enc.layers), ecfg.heads, pre_norm=ecfg.norm == "pre", activation=common_spec.Activation.RELU)
    dec_spec = transformer_spec.TransformerDecoderSpec(
        len(dec.layers), dcfg.heads, pre_norm=dcfg.norm == "pre", activation=common_spec.Activation.RELU)
    spec = transformer_spec.TransformerSpec(enc_spec, dec_spec)
    rows = sinusoidal_rows(loaded)

    _set_inputs(enc_spec, enc, rows)
    for layer_spec, layer in zip(enc_spec.layer, enc.layers):
        assert isinstance(layer, EncoderLayer) and layer.residual and layer.query_wavelength is None
        _self_attention(layer_spec.self_attention, layer.attn)
        _set_norm(layer_spec.self_attention.layer_norm, layer.norms[0])
        _set_ffn(layer_spec.ffn, layer, 1)
    if enc.final_norm is not None:
        _set_norm(enc_spec.layer_norm, enc.final_norm)

    _set_inputs(dec_spec, dec, rows)
    for layer_spec, layer in zip(dec_spec.layer, dec.layers):
        assert isinstance(layer, DecoderLayer)
        _self_attention(layer_spec.self_attention, layer.self_attn)
        _set_norm(layer_spec.self_attention.layer_norm, layer.norms[0])
        cross = layer.cross_attn
        _set_linear(layer_spec.attention.linear[0], cross.q_proj)
        _set_linear(layer_spec.attention.linear[1], cross.kv_proj)  # keys, then values: CTranslate2's fused KV
        _set_linear(layer_spec.attention.linear[2], cross.out_proj)
        _set_norm(layer_spec.attention.layer_norm, layer.norms[1])
        _set_ffn(layer_spec.ffn, layer, 2)
    if dec.final_norm is not None:
        _set_norm(dec_spec.layer_norm, dec.final_norm)
    _set_linear(dec_spec.projection, dec.generator)  # tied: the embedding table again (stored once, an alias)

    vocab = next(iter(_used_vocabs(loaded).values()))
    size = dec.generator.out_features
    tokens = [vocab.id_to_piece(i) for i in range(size)]
    spec.register_source_vocabulary(tokens)
    spec.register_target_vocabulary(tokens)
    config = spec.config
    config.unk_token, config.bos_token, config.eos_token = tokens[UNK], tokens[BOS], tokens[EOS]
    config.decoder_start_token = None if cfg.tag_position == "decoder_start" else tokens[BOS]
    config.add_source_bos = config.add_source_eos = False
    config.layer_norm_epsilon = layer_norm_epsilon(net)
    return spec


def _converter(loaded: LoadedModel) -> Any:
    """A `ctranslate2.converters.Converter` whose `_load` builds our spec."""
    from ctranslate2.converters import Converter

    class InterlinguaConverter(Converter):
        def _load(self) -> TransformerSpec:
            return build_spec(loaded)

    return InterlinguaConverter()


def require_ctranslate2() -> None:
    """Import ctranslate2 or raise the one error that says how to install it."""
    try:
        import ctranslate2  # noqa: F401
        import ctranslate2.converters  # noqa: F401
    except ImportError as err:
        raise InterlinguaError(f"exporting to CTranslate2 needs the ctranslate2 package ({err}): "
                               f"{INSTALL_HINT}") from None


def check_quantization(quantization: str | None) -> str | None:
    """The CTranslate2 weight type `quantization` names (None: float32 as trained), or the error that lists them."""
    if quantization in (None, "none"):
        return None
    if quantization not in QUANTIZATIONS:
        raise ConfigError(f"unknown CTranslate2 quantization {quantization!r}: give none or one of "
                          f"{', '.join(QUANTIZATIONS)}")
    return quantization


# -- writing -------------------------------------------------------------------------------------------

def write_ctranslate2(loaded: LoadedModel, out: str | Path, quantization: str | None = None,
                      weights_sha256: str | None = None) -> Path:
    """Write `loaded` as a CTranslate2 model folder at `out`, whole or not at all (a temporary sibling
    folder renamed into place); `out` must be new, empty or a previous export of this kind. `quantization`:
    None (float32, as trained) or one of `QUANTIZATIONS`; `weights_sha256`: the weights' fingerprint,
    recorded in interlingua.json for `exported_weights`. Returns `out`."""
    out = Path(out)
    quant = check_quantization(quantization)
    require_ctranslate2()
    check_target(out)
    check_exportable(loaded)
    vocabs = _used_vocabs(loaded)
    files, protos = tokenizer_files(vocabs)
    with atomic_folder(out) as tmp:
        _converter(loaded).convert(str(tmp), quantization=quant, force=True)  # replaces tmp by the model
        written = sorted(p.name for p in tmp.iterdir())
        for name, proto in protos.items():
            (tmp / name).write_bytes(proto)
        meta = export_record(loaded, files, quant, written)
        if weights_sha256 is not None:
            meta[WEIGHTS_SHA256] = weights_sha256
        (tmp / MARKER).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        (tmp / CARD).write_text(render_readme(meta, out.name), encoding="utf-8")
    return out


def export_record(loaded: LoadedModel, files: dict[str, str], quantization: str | None,
                  ct2_files: list[str]) -> dict[str, Any]:
    """interlingua.json: what the export holds and how its inputs are prepared."""
    cfg = loaded.config
    pre = cfg.preprocess
    tokenizer = sorted(set(files.values()))
    return {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "ctranslate2_files": ct2_files,
        "tokenizer": tokenizer[0],
        "encoder_langs": list(loaded.network.encoder_langs),
        "decoder_langs": list(loaded.network.decoder_langs),
        "directions": [list(d) for d in loaded.directions],
        "tag_position": cfg.model.tag_position,
        "language_tags": {lang: language_tag(lang) for lang in loaded.network.decoder_langs},
        "preprocess": {"lowercase": pre.lowercase, "normalize": pre.normalize, "max_len": pre.max_len},
        "quantization": quantization or "float32",
        "position_encodings": int(_position_rows(loaded)),
        "exported_from": loaded.provenance.source.name if loaded.provenance.source else None,
        "step": loaded.provenance.step,
    }


def _position_rows(loaded: LoadedModel) -> int:
    """The positions the export has encodings for (the encoder's; the decoder's learned table may differ)."""
    enc = loaded.network.encoders[SHARED]
    assert isinstance(enc, TransformerEncoder)
    table = enc.embedding.table
    return table.num_embeddings if table is not None else sinusoidal_rows(loaded)


def render_readme(meta: dict[str, Any], name: str) -> str:
    """README.md of the export: how to translate with ctranslate2 + sentencepiece, exactly as interlingua."""
    pre = meta["preprocess"]
    langs = meta["decoder_langs"]
    tgt = meta["directions"][0][1] if meta["directions"] else langs[0]
    tag = meta["language_tags"][tgt]
    steps = []
    if pre["normalize"]:
        steps.append('text = " ".join(unicodedata.normalize("NFKC", text).split())')
    else:
        steps.append('text = text.strip("\\r\\n")')
    if pre["lowercase"]:
        steps.append("text = text.lower()")
    prepare = "\n".join("    " + s for s in steps)
    decoder_start = meta["tag_position"] == "decoder_start"
    if decoder_start:
        source_line = f'source = [sp.encode(prepare(t), out_type=str)[:{pre["max_len"]}] for t in texts]'
        call = (f'results = translator.translate_batch(source, target_prefix=[["{tag}"]] * len(source),\n'
                f'                                     beam_size=1, min_decoding_length=0, max_decoding_length=50)')
        how = (f"The target language's tag (`{tag}`) is the decoder's first token: pass it as the only token of "
               f"`target_prefix` (the model's `decoder_start_token` is null, so CTranslate2 starts the decoder "
               f"with it and leaves it out of the output). The source carries no tag.")
    else:
        source_line = (f'source = [["{tag}"] + sp.encode(prepare(t), out_type=str)[:{pre["max_len"]}] '
                       f'for t in texts]')
        call = ("results = translator.translate_batch(source, beam_size=1, min_decoding_length=0, "
                "max_decoding_length=50)")
        how = (f"The target language's tag (`{tag}`) goes before the source's pieces; the decoder starts with "
               f"`<s>` as CTranslate2's does.")
    quant = meta["quantization"]
    return f"""# {name}: an interlingua model for CTranslate2

Exported by `interlingua export ctranslate2` from `{meta.get("exported_from") or "a model in memory"}`
(step {meta.get("step")}); weights: {quant}.
Source languages: {", ".join(meta["encoder_langs"])}; target languages: {", ".join(langs)}.

{how}

```python
import unicodedata

import ctranslate2
import sentencepiece as spm

translator = ctranslate2.Translator("{name}", device="cpu")
sp = spm.SentencePieceProcessor(model_file="{name}/{meta["tokenizer"]}")

def prepare(text):  # what interlingua does before sentencepiece (preprocess.normalize / lowercase)
{prepare}
    return text

texts = ["..."]  # non-empty lines (interlingua translates an empty line as an empty line)
{source_line}
{call}
for result in results:
    ids = [sp.piece_to_id(piece) for piece in result.hypotheses[0]]
    print(sp.decode([i for i in ids if i > 3]))  # without <pad> <unk> <s> </s>, as interlingua
```

Greedy search (`beam_size=1`) with `min_decoding_length=0` gives interlingua's greedy translation
token for token (float32 weights) where `max_decoding_length` is interlingua's `max_len`.
interlingua's default limit is per sentence: 2 x the source's subwords (a source tag included) + 10,
at most {4 * pre["max_len"]}. Inputs are cut to {pre["max_len"]} subwords as interlingua does.
Positions from {meta["position_encodings"]} on (source or output) are an error. CTranslate2's beam
search stops a sentence as interlingua's `beam_stop: top` does, so its beam outputs may differ from
interlingua's default. `interlingua.json` records the languages, tags and preprocessing.
"""


def read_export_record(out: Path) -> dict[str, Any] | None:
    """interlingua.json of a CTranslate2 export at `out`, or None where `out` holds none."""
    try:
        meta = json.loads((out / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and meta.get("format") == EXPORT_FORMAT else None


def exported_weights(out: Path) -> str | None:
    """The SHA-256 of the weights the CTranslate2 export at `out` was written from, as `write_ctranslate2`
    recorded it; None where `out` holds no export or the export records none."""
    meta = read_export_record(out)
    found = meta.get(WEIGHTS_SHA256) if meta is not None else None
    return found if isinstance(found, str) else None


def _previous_export(out: Path) -> set[str] | None:
    """The files a previous CTranslate2 export wrote in `out` (from its interlingua.json), or None where it
    is none (a model folder from `export folder` included)."""
    meta = read_export_record(out)
    if meta is None:
        return None
    try:
        return {MARKER, CARD, str(meta["tokenizer"]), *map(str, meta["ctranslate2_files"])}
    except (KeyError, TypeError):
        return None


def check_target(out: Path) -> None:
    """Refuse an `out` this export must not replace (`atomic_files.check_replaceable`)."""
    check_replaceable(out, _previous_export, "a CTranslate2 export from `interlingua export ctranslate2`: give a "
                                             "new or empty folder (an export replaces only a previous export of "
                                             "the same kind)")

