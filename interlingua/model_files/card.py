"""The README.md of a model folder: what the model reads and writes, what it is, what it was trained
on, and the BLEU recorded for it.

Written from the folder's config.json alone, so the card and the config never disagree and
exporting a folder again writes the same card. Every number is one recorded by training or
evaluation (the checkpoint's training state, metrics.jsonl, `eval/bleu_*.json`); where none was
recorded the card says "not recorded" rather than leave a blank that reads like a zero.
"""
from __future__ import annotations

from typing import Any

from interlingua.errors import RecordError
from interlingua.records import Validation

NOT_RECORDED = "not recorded"


def render_card(meta: dict[str, Any]) -> str:
    """The model card (markdown) of a model folder whose config.json holds `meta`."""
    cfg = meta["config"]
    record = meta.get("record") or {}
    training = record.get("training") or {}
    sources, targets = meta["encoder_langs"], meta["decoder_langs"]
    trained = [tuple(d) for d in meta["directions"]]
    zero_shot = [(s, t) for s in sources for t in targets if s != t and (s, t) not in set(trained)]
    model = cfg["model"]
    origin = f" Exported from `{meta['exported_from']}`." if meta.get("exported_from") else ""
    lines = [
        f"# {cfg.get('name') or 'interlingua model'}",
        "",
        (f"A multilingual translation model and sentence encoder (interlingua): {_kind(model['encoder'])} "
         f"encoder, {_bridge(model['bridge'])}, {_kind(model['decoder'])} decoder; "
         f"{meta.get('parameters', 0):,} parameters.{origin}"),
        "",
        "## Languages",
        "",
        f"- Reads (encoders): {', '.join(sources)}",
        f"- Writes (decoders): {', '.join(targets)}",
        f"- Trained directions: {_directions(trained)}",
        f"- Zero-shot directions (an encoder and a decoder never trained together): {_directions(zero_shot) or 'none'}",
        "",
        *_model_section(meta),
        *_training_section(cfg, training),
        *_dev_section(cfg, training, record.get("dev_from")),
        *_test_section(record.get("test") or []),
        *_files_section(meta),
        *_use_section(sources, targets, trained),
    ]
    return "\n".join(lines).rstrip() + "\n"


def _directions(pairs: list[tuple[str, str]]) -> str:
    return ", ".join(f"{s}->{t}" + (" (copy)" if s == t else "") for s, t in pairs)


def _settings(slot: dict[str, Any]) -> str:
    return ", ".join(f"{k} {str(v).lower() if isinstance(v, bool) else v}" for k, v in slot.items()
                     if k != "type" and v is not None)


def _kind(slot: dict[str, Any]) -> str:
    return f"`{slot.get('type', '?')}`"


def _bridge(slot: dict[str, Any]) -> str:
    return "no bridge" if slot.get("type") == "none" else f"{_kind(slot)} bridge"


def _model_section(meta: dict[str, Any]) -> list[str]:
    model = meta["config"]["model"]
    per = "one for all languages (with a target-language tag, " + str(model.get("tag_position")) + ")" \
        if model.get("shared") else "one per language"
    bridge = model["bridge"]
    lines = ["## Model", "",
             f"- Encoder: {_kind(model['encoder'])} ({_settings(model['encoder'])}), {per}",
             "- Bridge: none (the decoders attend over the encoder states)" if bridge.get("type") == "none"
             else f"- Bridge: {_kind(bridge)} ({_settings(bridge)}), shared by all languages",
             f"- Decoder: {_kind(model['decoder'])} ({_settings(model['decoder'])}), {per}",
             f"- Embeddings: {model.get('embed_dim')}; dropout in training: {model.get('dropout')}",
             f"- Parameters: {meta.get('parameters', 0):,} (a tied weight counted once), float32"]
    for ext in meta.get("extended") or []:
        lines.append(f"- Language added after training: {ext.get('lang')} (`interlingua extend`, "
                     f"vocabulary of {ext.get('vocab_size')}; its own ids follow the others')")
    if meta.get("averaged_from"):
        lines.append(f"- Weights: the average of {len(meta['averaged_from'])} checkpoints of one run")
    return lines + [""]


def _training_section(cfg: dict[str, Any], training: dict[str, Any]) -> list[str]:
    pre, directions, train = cfg.get("preprocess") or {}, cfg.get("directions") or {}, cfg.get("train") or {}
    limit = pre.get("max_train_sentences")
    lines = ["## Training", "",
             f"- Data: corpus `{cfg.get('corpus')}` (as the config names it), "
             + (f"the first {limit:,} training lines" if limit else "all its training lines"),
             f"- Directions: mode `{directions.get('mode')}`"
             + (f", pairs {_directions([tuple(p) for p in directions['pairs']])}" if directions.get("pairs") else "")
             + (", with copy directions" if directions.get("monolingual") else "")
             + (f", held out: {_directions([tuple(p) for p in directions['held_out']])}"
                if directions.get("held_out") else ""),
             "- Subwords: sentencepiece BPE, "
             + (f"one joint model of {pre.get('vocab_size')} pieces" if pre.get("joint_vocab")
                else f"{pre.get('vocab_size')} pieces per language")
             + (", lowercased text" if pre.get("lowercase") else ", cased text")
             + f", at most {pre.get('max_len')} subwords a sentence"]
    step = training.get("step")
    if isinstance(step, int):
        elapsed = training.get("elapsed_s")
        lines.append(f"- Steps: {step:,}"
                     + (f" of {training['max_steps']:,} planned" if training.get("max_steps") else "")
                     + (f", {_duration(elapsed)} of training" if isinstance(elapsed, (int, float)) else "")
                     + f"; {_batches(train)}, {train.get('optimizer')} at lr {train.get('lr')}")
    else:
        lines.append(f"- Steps: {NOT_RECORDED} (the checkpoint holds no training state)")
    if training.get("init"):
        lines.append(f"- Started from the weights of `{training['init']}`")
    return lines + [""]


def _dev_section(cfg: dict[str, Any], training: dict[str, Any], dev_from: str | None) -> list[str]:
    lines = ["## Dev BLEU", ""]
    dev = _dev_record(training.get("dev"))
    if dev is None or not dev.directions:
        return lines + [(f"{NOT_RECORDED.capitalize()}: no dev validation of these weights' training step in the "
                         "checkpoint's training state or in a metrics.jsonl beside it."), ""]
    pre, train = cfg.get("preprocess") or {}, cfg.get("train") or {}
    limit = pre.get("max_valid_sentences")
    source = {"checkpoint": "the checkpoint's training state",
              "metrics.jsonl": "metrics.jsonl beside the checkpoint"}.get(dev_from or "", "training")
    lines += [f"As recorded at step {dev.step} ({source}): lowercased sacreBLEU (13a) on "
              + (f"the first {limit:,} sentences of " if limit else "")
              + f"the corpus's `val` split, beam {train.get('valid_beam', 1)}.", "",
              "| direction | kind | BLEU | chrF |", "|---|---|---|---|"]
    for name, r in dev.directions.items():
        lines.append(f"| {name} | {'zero-shot' if r.zero_shot else 'trained'} | {_num(r.bleu)} | {_num(r.chrf)} |")
    lines += ["", f"Mean over the trained directions: {_num(dev.mean_bleu)}.", ""]
    return lines


def _dev_record(stored: object) -> Validation | None:
    """The dev validation a folder's config.json records (None: none, or one that does not read)."""
    try:
        return None if stored is None else Validation.from_json(stored)
    except RecordError:
        return None


def _test_section(results: list[dict[str, Any]]) -> list[str]:
    lines = ["## Test BLEU", ""]
    if not results:
        return lines + [(f"{NOT_RECORDED.capitalize()}: no `interlingua evaluate bleu` results (eval/bleu_*.json) "
                         "beside the checkpoint when it was exported."), ""]
    for res in results:
        zero_shot = set(res.get("zero_shot") or [])
        cased = res.get("bleu_cased") or {}
        lines += [f"From `{res['file']}` beside the checkpoint: split `{res['split']}`, beam {res.get('beam_size')}"
                  + (f", through {res['pivot']}" if res.get("pivot") else "")
                  + (f"; {res['signature']}" if res.get("signature") else "") + ".", "",
                  "| direction | kind | BLEU (lowercased) | BLEU (cased) |", "|---|---|---|---|"]
        for src, row in res["bleu"].items():
            for tgt, value in row.items():
                name = f"{src}-{tgt}"
                lines.append(f"| {name} | {'zero-shot' if name in zero_shot else 'trained'} | {_num(value)} | "
                             f"{_num(cased.get(src, {}).get(tgt))} |")
        lines.append("")
    return lines


def _files_section(meta: dict[str, Any]) -> list[str]:
    by_file: dict[str, list[str]] = {}
    for lang, name in meta["tokenizers"].items():
        by_file.setdefault(name, []).append(lang)
    return ["## Files", "",
            (f"- `config.json`: the experiment config, the languages and directions, what this card reports, and "
             f"the SHA-256 of every other file, verified at load (folder format `{meta['format']}` {meta['version']})"),
            f"- `{meta['weights']}`: the weights (safetensors; a tied weight is stored once)",
            *[f"- `{name}`: the sentencepiece model of {', '.join(langs)}" for name, langs in by_file.items()],
            "- `README.md`: this card", "",
            "Nothing here is a pickle: loading reads JSON, safetensors and sentencepiece files only.", ""]


def _use_section(sources: list[str], targets: list[str], trained: list[tuple[str, str]]) -> list[str]:
    src, tgt = next(((s, t) for s, t in trained if s != t), (sources[0], targets[0]))
    return ["## Use", "", "```python", "import interlingua",
            'model = interlingua.load("path/to/this/folder")',
            f'model.translate(["..."], src="{src}", tgt="{tgt}", beam=5)',
            f'model.encode(["..."], lang="{src}")  # sentence vectors', "```", "",
            "```bash", f"interlingua translate --model path/to/this/folder --src {src} --tgt {tgt} < input.txt",
            "interlingua serve --model path/to/this/folder", "```", ""]


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} minutes" if seconds < 7200 else f"{seconds / 3600:.1f} hours"


def _num(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def _batches(train: dict) -> str:
    """What a step trained on: token batches mixing the directions, or sentence batches of one direction."""
    if train.get("batch_tokens"):
        return f"steps of at most {train['batch_tokens']:,} tokens, one batch of every direction"
    return f"batches of {train.get('batch_size')} sentence pairs"
