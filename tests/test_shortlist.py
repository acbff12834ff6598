"""The lexical shortlist: counted from the bitext, stored without pickle, and decoding restricted to each
sentence's own candidates; and the Transformer's beam expansion, which must not change any output."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from test_export_ctranslate2 import WORDS, trained  # noqa: F401 - a fixture: the letter-code Transformer

import interlingua
from interlingua.cli import main
from interlingua.data.shortlist import DirectionTable, Shortlist, count_table
from interlingua.data.vocab import BOS, EOS
from interlingua.errors import ConfigError, DataError
from interlingua.inference.shortlist_build import build_shortlist
from interlingua.model_files.load import load_model
from interlingua.modules.base import Decoder
from interlingua.modules.registry import DECODERS
from interlingua.modules.search import beam_search_nbest
from interlingua.modules.transformer import TransformerDecoderState


def texts(lang: str, n: int = 24, seed: int = 5) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(lang[1] + rng.choice(WORDS) for _ in range(rng.randint(1, 8))) for _ in range(n)]


def test_count_table_ranks_by_dice_and_keeps_the_frequent():
    # source 5 co-occurs with target 7 in both pairs, with 8 in one; 8 also occurs in a pair without 5
    pairs = [(np.array([5, 6]), np.array([7, 8])), (np.array([5]), np.array([7])), (np.array([6]), np.array([8, 9]))]
    table = count_table(iter(pairs), 10, 10, per_token=2, frequent=1)
    # Dice(5,7) = 2*2/(2+2) = 1, Dice(5,8) = 2*1/(2+2) = 0.5; Dice(6,8) = 2*2/(2+2) = 1, Dice(6,9) = 2*1/(2+1),
    # Dice(6,7) = 2*1/(2+2): the rare 9 beats the common 7
    assert table.table[5].tolist() == [7, 8]
    assert table.table[6].tolist() == [8, 9]
    assert table.table[4].tolist() == [-1, -1]  # never seen
    assert table.frequent.tolist() == [7]  # 7 and 8 both in 2 pairs: the lower id first
    assert table.candidates(np.array([5, 4])).tolist() == [7, 8]


def test_a_shortlist_file_round_trips_and_anything_else_is_one_error(tmp_path):
    sl = Shortlist({("en", "de"): DirectionTable(np.array([[5, -1], [6, 7]], dtype=np.int32),
                                                 np.array([9], dtype=np.int32))}, 2, 1)
    back = Shortlist.load(sl.save(tmp_path / "s.safetensors"))
    assert back.directions == [("en", "de")] and (back.per_token, back.frequent) == (2, 1)
    assert back.direction("en", "de").table.tolist() == [[5, -1], [6, 7]]
    assert back.direction("de", "en") is None
    (tmp_path / "bad").write_bytes(b"\x00" * 40)
    with pytest.raises(DataError, match="is not a shortlist file"):
        Shortlist.load(tmp_path / "bad")
    with pytest.raises(DataError, match="does not exist"):
        Shortlist.load(tmp_path / "absent")


def test_cli_builds_a_shortlist_and_translates_within_each_sentences_candidates(trained, tmp_path, capsys):
    out = tmp_path / "s.safetensors"
    assert main(["shortlist", str(trained), "--out", str(out), "--per-token", "2", "--frequent", "0"]) == 0
    sl = Shortlist.load(out)
    assert sl.directions == [("xa", "xb"), ("xb", "xa")]
    model = interlingua.load(trained, "cpu")
    source = texts("xb")
    table = sl.direction("xb", "xa")
    ids = model.token_ids(source, "xb")
    assert all(len(table.candidates(s)) < len(model.vocabs["xa"]) // 3 for s in ids)  # a real restriction
    src_file = tmp_path / "in.txt"
    src_file.write_text("".join(t + "\n" for t in source), encoding="utf-8")
    for beam in ("1", "4"):
        hyp = tmp_path / f"out{beam}.txt"
        assert main(["translate", "--model", str(trained), "--src", "xb", "--tgt", "xa", "--beam", beam,
                     "--shortlist", str(out), "-i", str(src_file), "-o", str(hyp)]) == 0
        lines = hyp.read_text(encoding="utf-8").splitlines()
        assert len(lines) == len(source)
        for line, s, written in zip(lines, ids, model.token_ids(lines, "xa")):
            assert set(written.tolist()) <= set(table.candidates(s).tolist()), line
    # the code is letter for letter: two candidates per subword lose nothing against the full vocabulary
    full = model.translate(source, "xb", "xa", beam=1)
    assert model.use_shortlist(out).translate(source, "xb", "xa", beam=1) == full


def test_every_id_a_candidate_gives_the_full_vocabularys_translations(trained):
    model = interlingua.load(trained, "cpu")
    size = len(model.vocabs["xa"])
    everything = np.tile(np.arange(size, dtype=np.int32), (size, 1))
    sl = Shortlist({("xb", "xa"): DirectionTable(everything, np.arange(size, dtype=np.int32))}, size, size)
    source = texts("xb", 16, seed=9)
    for beam in (1, 3):
        full = model.use_shortlist(None).translate(source, "xb", "xa", beam=beam)
        assert model.use_shortlist(sl).translate(source, "xb", "xa", beam=beam) == full
        # no n-gram twice: blocked over the shortlist's candidate positions as over the vocabulary's ids
        blocked = model.use_shortlist(None).translate(source, "xb", "xa", beam=beam, no_repeat_ngram=1)
        assert model.use_shortlist(sl).translate(source, "xb", "xa", beam=beam, no_repeat_ngram=1) == blocked != full


def test_the_lstm_decoder_decodes_with_a_shortlist_too(trained_model):
    model = interlingua.load(trained_model, "cpu")
    size = len(model.vocabs["de"])
    sources = ["a man is riding a bike .", "two dogs play in the snow .", "a woman sings ."]
    everything = np.tile(np.arange(size, dtype=np.int32), (len(model.vocabs["en"]), 1))
    for beam in (1, 3):
        full = model.use_shortlist(None).translate(sources, "en", "de", beam=beam)
        sl = Shortlist({("en", "de"): DirectionTable(everything, np.arange(size, dtype=np.int32))}, size, size)
        assert model.use_shortlist(sl).translate(sources, "en", "de", beam=beam) == full


def test_a_one_direction_model_gets_its_shortlist(multi30k_corpus, tmp_path):
    """A bilingual en->de model has no German encoder: the target side is tokenised without one."""
    from conftest import tiny_config

    from interlingua.config import parse_config
    from interlingua.training.trainer import train
    checkpoint = train(parse_config(tiny_config(multi30k_corpus, tmp_path / "run"))).best_checkpoint
    model = interlingua.load(checkpoint, "cpu")
    assert model.languages.trained == (("en", "de"),)
    sl = build_shortlist(model, max_pairs=200)
    assert sl.directions == [("en", "de")]
    assert len(model.use_shortlist(sl).translate(["a dog runs ."], "en", "de")) == 1


def test_a_sentences_shortlisted_translation_does_not_depend_on_its_batch(trained, tmp_path):
    model = interlingua.load(trained, "cpu").use_shortlist(build_shortlist(interlingua.load(trained, "cpu"),
                                                                           per_token=1, frequent=2))
    source = texts("xa", 12, seed=3)
    for beam in (1, 4):
        together = model.translate(source, "xa", "xb", beam=beam)
        assert [model.translate([s], "xa", "xb", beam=beam)[0] for s in source] == together


def test_a_shortlist_for_another_model_or_kind_is_refused(trained, monkeypatch):
    model = interlingua.load(trained, "cpu")
    wrong = Shortlist({("xa", "xb"): DirectionTable(np.zeros((3, 1), dtype=np.int32), np.zeros(0, dtype=np.int32))})
    with pytest.raises(ConfigError, match="built for another model"):
        model.use_shortlist(wrong)
    assert model.shortlist is None
    decoder_kind = DECODERS.get(model.kinds.decoder)
    with monkeypatch.context() as patch:
        patch.setattr(decoder_kind, "step_states", Decoder.step_states)
        with pytest.raises(ConfigError, match="cannot decode with a shortlist"):
            model.use_shortlist(build_shortlist(model, per_token=1, frequent=2))
    rep = model.represent(texts("xa", 2), "xa")
    bare = type(rep)(rep.memory, rep.mask, rep.lengths, rep.src, rep.tgt, fingerprint=rep.fingerprint)  # no ids
    model.use_shortlist(build_shortlist(model, per_token=1, frequent=2))
    with pytest.raises(ValueError, match="no source ids"):
        model.generate(bare, "xb")


def test_beams_sharing_one_memory_give_the_repeated_memorys_hypotheses_and_scores(trained, monkeypatch):
    """The Transformer state's `expand_beams` keeps the memory once per sentence; with it replaced by `select`
    (every beam its own copy of the memory, as beam search ran before `expand_beams`) nothing changes."""
    model = interlingua.load(trained, "cpu")
    net = load_model(trained).network
    source = texts("xa", 10, seed=4)
    ids = model.token_ids(source, "xa")
    lengths = torch.tensor([len(s) for s in ids])
    batch = torch.zeros(len(ids), int(lengths.max()), dtype=torch.long)
    for i, s in enumerate(ids):
        batch[i, :len(s)] = torch.as_tensor(s)
    start = model.vocabs["xb"].piece_id("<2xb>")
    assert start not in (BOS, EOS)
    with torch.inference_mode():
        bridged = net.run_encoder(batch, lengths, "xa")
        results = []
        for repeat in (False, True):
            decoder, state = net.start_decoding(bridged, "xb")
            assert isinstance(state, TransformerDecoderState)
            with monkeypatch.context() as patch:
                if repeat:
                    patch.setattr(TransformerDecoderState, "expand_beams", TransformerDecoderState.select)
                results.append(beam_search_nbest(decoder, state, lengths * 2 + 5, 4, 1.0, start))
    shared, repeated = results
    assert [[h for _, h in nbest] for nbest in shared] == [[h for _, h in nbest] for nbest in repeated]
    for a, b in zip(shared, repeated):
        assert [s for s, _ in a] == pytest.approx([s for s, _ in b], abs=1e-6)
