import torch

from interlingua.config import ModelConfig
from interlingua.data.vocab import BOS, EOS
from interlingua.inference.search import beam_search, greedy_search
from interlingua.modules.model import TranslationModel


def model_and_state(seed=0, batch=4):
    torch.manual_seed(seed)
    cfg = ModelConfig.model_validate({"embed_dim": 16, "encoder": {"hidden": 16, "layers": 1}, "bridge": {"heads": 3, "hidden": 8},
                                      "decoder": {"hidden": 16, "layers": 1}, "dropout": 0.0})
    model = TranslationModel(cfg, {"en": 12, "de": 12}, ["en"], ["de"]).eval()
    src = torch.randint(4, 12, (batch, 5))
    bridged = model.encode(src, torch.tensor([5, 4, 3, 5][:batch]), "en")
    dec = model.decoder_for("de")
    return dec, dec.start(bridged.memory, bridged.memory_mask)


def sequence_logprob(dec, state, row, seq, finished=True):
    """log p(seq + EOS); for an unfinished sequence log p(seq), an upper bound of any completion."""
    st = state.select(torch.tensor([row]))
    prev, total = torch.tensor([BOS]), 0.0
    for tok in seq + ([EOS] if finished else []):
        logp, st = dec.step(prev, st)
        total += float(logp[0, tok])
        prev = torch.tensor([tok])
    return total


@torch.inference_mode()
def test_beam_one_equals_greedy():
    for seed in range(5):
        dec, state = model_and_state(seed)
        assert beam_search(dec, state, 12, beam_size=1) == greedy_search(dec, state, 12)


@torch.inference_mode()
def test_beam_finds_at_least_as_probable_translations():
    better = 0
    for seed in range(6):
        dec, state = model_and_state(seed)
        greedy = greedy_search(dec, state, 10)
        beam = beam_search(dec, state, 10, beam_size=5, length_penalty=0.0)
        for row in range(4):
            g = sequence_logprob(dec, state, row, greedy[row], finished=len(greedy[row]) < 10)
            if len(beam[row]) < 10:  # beam finished with EOS: it must not be worse than greedy
                b = sequence_logprob(dec, state, row, beam[row])
                assert b >= g - 1e-4
                better += b > g + 1e-4
    assert better > 0  # the search actually searches


@torch.inference_mode()
def test_max_len_is_respected():
    dec, state = model_and_state(1)
    assert all(len(h) <= 3 for h in greedy_search(dec, state, 3))
    assert all(len(h) <= 3 for h in beam_search(dec, state, 3, beam_size=3))
