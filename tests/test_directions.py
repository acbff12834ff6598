from collections import Counter

import pytest

from interlingua.config import DirectionsConfig
from interlingua.data.directions import DirectionScheduler, build_directions, zero_shot_directions
from interlingua.errors import ConfigError

LANGS = ["cs", "de", "en", "fr"]


def dirs(**kw):
    return build_directions(DirectionsConfig(**kw), LANGS)


def test_modes():
    assert dirs(mode="bilingual", pairs=[["en", "de"]]) == [("en", "de")]
    pivot = dirs(mode="pivot", pivot="en")
    assert set(pivot) == {("cs", "en"), ("de", "en"), ("fr", "en"), ("en", "cs"), ("en", "de"), ("en", "fr")}
    assert len(dirs(mode="many2many")) == 12
    mono = dirs(mode="pivot", pivot="en", monolingual=True)
    assert {("en", "en"), ("de", "de"), ("fr", "fr"), ("cs", "cs")} <= set(mono) and len(mono) == 10


def test_held_out_pairs_become_zero_shot():
    trained = dirs(mode="many2many", monolingual=True, held_out=[["de", "fr"], ["fr", "de"]])
    assert ("de", "fr") not in trained and ("fr", "de") not in trained and len(trained) == 10 + 4
    assert zero_shot_directions(trained, LANGS) == [("de", "fr"), ("fr", "de")]
    assert set(zero_shot_directions(dirs(mode="pivot", pivot="en"), LANGS)) == {
        (a, b) for a in ["cs", "de", "fr"] for b in ["cs", "de", "fr"] if a != b}


@pytest.mark.parametrize("kw, needle", [
    ({"mode": "many2many", "languages": ["en", "xx"]}, "xx"),
    ({"mode": "pivot", "pivot": "ja"}, "ja"),
    ({"mode": "bilingual", "pairs": [["en", "de"]], "held_out": [["de", "fr"]]}, "de->fr"),
])
def test_bad_directions_name_the_problem(kw, needle):
    with pytest.raises(ConfigError, match=needle):
        dirs(**kw)


def test_scheduler_rotates_uniformly_and_resumes():
    directions = dirs(mode="many2many")
    sched = DirectionScheduler(directions, seed=3)
    first = [sched.next() for _ in range(len(directions))]
    assert sorted(first) == sorted(directions)  # every direction once per cycle
    counts = Counter(sched.next() for _ in range(len(directions) * 10))
    assert set(counts.values()) == {10}
    again = DirectionScheduler(directions, seed=3)
    assert [again.next() for _ in range(len(directions))] == first  # same seed, same order
    n = len(directions) * 3
    seed3, seed4 = DirectionScheduler(directions, seed=3), DirectionScheduler(directions, seed=4)
    three, four = [seed3.next() for _ in range(n)], [seed4.next() for _ in range(n)]
    assert three[:len(directions)] == first and three != four  # another seed, another order
    cycles = [tuple(three[i:i + len(directions)]) for i in range(0, n, len(directions))]
    assert len(set(cycles)) == 3  # reshuffled every cycle, not one order repeated
    state = sched.state_dict()
    upcoming = [sched.next() for _ in range(7)]
    resumed = DirectionScheduler(directions, seed=3)
    resumed.load_state_dict(state)
    assert [resumed.next() for _ in range(7)] == upcoming
