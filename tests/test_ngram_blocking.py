"""`no_repeat_ngram`: no n-gram twice in an output, in greedy and beam search, whatever the batching (tails of
batches joined mid-search), through a pivot and from the command line; until a repeat would come, the output
is the unblocked one."""
from __future__ import annotations

import pytest
import torch
from test_decoding import _batch, random_checkpoint, tiny_model

from interlingua.cli import main
from interlingua.errors import ArgumentError, ArgumentTypeError
from interlingua.inference.api import load
from interlingua.modules.ngram_blocking import NgramBlockingDecoder, repeating_tokens
from interlingua.modules.search import beam_search, greedy_search

SENTENCES = ["a dog runs in the park .", "the woman eats a red ball", "", "small child sits near the big street .",
             "the cat", "a man and a woman walk a dog on the beach near the water .", "two dogs"]


def repeated_ngram(ids: list[int], n: int) -> int | None:
    """The position of the first token that completes an n-gram seen before in `ids`, or None."""
    seen: set[tuple[int, ...]] = set()
    for end in range(n, len(ids) + 1):
        gram = tuple(ids[end - n:end])
        if gram in seen:
            return end - 1
        seen.add(gram)
    return None


def test_repeating_tokens_are_those_that_complete_a_seen_ngram():
    history = torch.tensor([[5, 6, 7, 5, 6], [-1, -1, 9, 9, 9], [-1, -1, -1, -1, 4]])
    rows, tokens = repeating_tokens(history, 3)
    assert sorted(zip(rows.tolist(), tokens.tolist())) == [(0, 7), (1, 9)]  # 5 6 -> 7; 9 9 -> 9; padding never
    rows, tokens = repeating_tokens(history, 1)
    assert sorted(zip(rows.tolist(), tokens.tolist())) == [(0, 5), (0, 5), (0, 6), (0, 6), (0, 7), (1, 9), (1, 9),
                                                           (1, 9), (2, 4)]
    assert repeating_tokens(history, 6)[0].numel() == 0


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("beam", [1, 3])
@torch.inference_mode()
def test_no_ngram_twice_and_the_unblocked_output_until_the_first_repeat(n, beam):
    network = tiny_model("attention", False, init=0.4)  # large random weights: loops
    src, lengths, *_ = _batch(17)
    decoder, state = network.start_decoding(network.run_encoder(src, lengths, "en"), "de")

    def search(dec, st):
        return greedy_search(dec, st, 30) if beam == 1 else beam_search(dec, st, 30, beam_size=beam)

    free = search(decoder, state)
    assert any(repeated_ngram(ids, n) is not None for ids in free)  # else the test shows nothing
    blocking = NgramBlockingDecoder(decoder, n)
    blocked = search(blocking, blocking.wrap(state))
    assert all(repeated_ngram(ids, n) is None for ids in blocked), blocked
    for a, b in zip(free, blocked):
        first = repeated_ngram(a, n)
        if first is None:
            assert a == b
        elif beam == 1:  # greedy: the same tokens up to the one that would repeat, then another
            assert b[:first] == a[:first] and b[first:first + 1] != a[first:first + 1]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    # large uniform weights: outputs that loop (the random model's own vocabularies are real, tiny ones)
    return load(random_checkpoint(tmp_path_factory.mktemp("ngram") / "random.pt", langs=("en", "de", "fr"),
                                  param_init=0.5))


@pytest.mark.parametrize("beam", [1, 3])
def test_the_output_does_not_depend_on_the_batching(model, beam):
    """Batches of 2: tails of batches joined at other steps (their histories padded), sentences leaving."""
    whole = model.translate(SENTENCES, "en", "de", beam=beam, no_repeat_ngram=2)
    assert model.translate(SENTENCES, "en", "de", beam=beam, no_repeat_ngram=2, batch_size=2) == whole
    assert model.translate(SENTENCES, "en", "de", beam=beam, no_repeat_ngram=2, batch_size=3, workers=2) == whole
    assert whole != model.translate(SENTENCES, "en", "de", beam=beam)  # the random model repeats itself
    assert whole[2] == ""


def test_a_pivot_blocks_both_legs(model):
    mid = model.translate(SENTENCES, "en", "fr", no_repeat_ngram=3)
    assert model.translate(SENTENCES, "en", "de", pivot="fr", no_repeat_ngram=3) == \
        model.translate(mid, "fr", "de", no_repeat_ngram=3)


def test_command_line_and_bad_values(model, tmp_path, capsys):
    """`interlingua translate --no-repeat-ngram N` gives Model.translate(no_repeat_ngram=N)'s output; a bad N is
    one usage error, in Python one ArgumentError."""
    src = tmp_path / "in.en"
    src.write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    out = tmp_path / "out.de"
    ckpt = str(model.path)
    for beam in (1, 3):
        assert main(["translate", "--model", ckpt, "--src", "en", "--tgt", "de", "--beam", str(beam),
                     "--no-repeat-ngram", "2", "-i", str(src), "-o", str(out), "--force"]) == 0
        assert out.read_text(encoding="utf-8").splitlines() == model.translate(SENTENCES, "en", "de", beam=beam,
                                                                                no_repeat_ngram=2)
    with pytest.raises(SystemExit) as exit_info:
        main(["translate", "--model", ckpt, "--src", "en", "--tgt", "de", "--no-repeat-ngram", "-1", "-i", str(src)])
    assert exit_info.value.code == 2 and "--no-repeat-ngram: must be >= 0, got -1" in capsys.readouterr().err
    with pytest.raises(ArgumentError, match="no_repeat_ngram: must be >= 0"):
        model.translate(SENTENCES, "en", "de", no_repeat_ngram=-1)
    with pytest.raises(ArgumentTypeError, match="no_repeat_ngram: expected a whole number"):
        model.translate(SENTENCES, "en", "de", no_repeat_ngram=True)
