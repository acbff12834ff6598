"""Write the Multi30k recipes of the papers, at CPU scale and at paper scale.

    python recipes/generate.py        # (re)writes recipes/multi30k/{cpu,paper}/*.yaml

One function per setting keeps every recipe consistent with the others; the YAML files are
what users run (`interlingua train recipes/multi30k/cpu/m2m_mono.yaml`).
"""
from __future__ import annotations

from itertools import permutations
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
LANGS = ["cs", "de", "en", "fr"]
PAIRS = [("cs", "de"), ("cs", "en"), ("cs", "fr"), ("de", "en"), ("de", "fr"), ("en", "fr")]

SCALES = {
    # One CPU core: 1-layer BiLSTM/LSTM of 256, about 0.2 s per batch of 64 on this class of
    # machine. Budgets are steps, equal per direction, so results do not depend on machine load.
    "cpu": {
        "preprocess": {"lowercase": True, "vocab_size": 4000, "max_len": 60, "max_valid_sentences": 300},
        "model": {"embed_dim": 256, "encoder": {"layers": 1, "hidden": 256},
                  "bridge": {"type": "attention", "heads": 10, "hidden": 256},
                  "decoder": {"layers": 1, "hidden": 256}, "dropout": 0.2},
        "train": {"optimizer": "adam", "lr": 0.002, "batch_size": 64, "penalty_weight": 1.0, "threads": 1},
        "steps_per_direction": 500,
        "seconds_per_step": 0.2,
        "joint_vocab_size": 8000,
    },
    # The papers' sizes (000 Sec. 3.1): d_h 512, k 10, d_w 1024, SGD lr 1.0, batch 64, 10k BPE.
    "paper": {
        "preprocess": {"lowercase": True, "vocab_size": 10000, "max_len": 100},
        "model": {"embed_dim": 512, "encoder": {"layers": 2, "hidden": 512},
                  "bridge": {"type": "attention", "heads": 10, "hidden": 1024},
                  "decoder": {"layers": 2, "hidden": 512}, "dropout": 0.3},
        "train": {"optimizer": "sgd", "lr": 1.0, "batch_size": 64, "max_steps": 200_000,
                  "valid_every": 5000, "penalty_weight": 1.0},
        "steps_per_direction": None,
        "seconds_per_step": None,
        "joint_vocab_size": 40000,
    },
}


def n_directions(directions: dict) -> int:
    from interlingua.config import DirectionsConfig
    from interlingua.data.directions import build_directions
    return len(build_directions(DirectionsConfig(**directions), LANGS))


def recipe(scale: str, name: str, directions: dict, comment: str, bridge: dict | None = None,
           train: dict | None = None, shared: bool = False, budget_factor: int = 1) -> dict:
    s = SCALES[scale]
    model = {**s["model"], "bridge": {**s["model"]["bridge"], **(bridge or {})}}
    pre = dict(s["preprocess"])
    if shared:
        model.update(shared=True, bridge={"type": "none"})
        pre.update(joint_vocab=True, vocab_size=s["joint_vocab_size"])
    tr = {**s["train"], **(train or {})}
    if s["steps_per_direction"]:
        # equal compute per direction: the budget grows with the number of directions
        tr["max_steps"] = s["steps_per_direction"] * budget_factor * n_directions(directions)
        tr["valid_every"] = max(250, tr["max_steps"] // 4)
    return {"_comment": comment, "name": f"{scale}_{name}", "corpus": "../../../data/multi30k/corpus.yaml",
            "work_dir": f"runs/multi30k/{scale}/{name}", "preprocess": pre, "directions": directions,
            "model": model, "train": tr}


def all_recipes(scale: str) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for s, t in permutations(LANGS, 2):
        bi = {"mode": "bilingual", "pairs": [[s, t]]}
        out[f"bilingual_{s}_{t}"] = recipe(scale, f"bilingual_{s}_{t}", bi, f"Bilingual {s}->{t} with the attention bridge (Table 1, lower left).")
        out[f"bilingual_nobridge_{s}_{t}"] = recipe(scale, f"bilingual_nobridge_{s}_{t}", bi,
                                                    f"Bilingual {s}->{t} without bridge: classic attention over H (Table 1, upper left).",
                                                    bridge={"type": "none"})
    pivot = {"mode": "pivot", "pivot": "en"}
    out["pivot_en"] = recipe(scale, "pivot_en", pivot, "{de,fr,cs}<->en: zero-shot between non-English languages collapses (Table 1, upper centre).")
    out["pivot_en_mono"] = recipe(scale, "pivot_en_mono", {**pivot, "monolingual": True},
                                  "{de,fr,cs}<->en + monolingual copies: zero-shot repaired (Table 1, lower centre).")
    out["m2m"] = recipe(scale, "m2m", {"mode": "many2many"}, "Many-to-many (Table 1, upper right).")
    out["m2m_mono"] = recipe(scale, "m2m_mono", {"mode": "many2many", "monolingual": True},
                             "Many-to-many + monolingual copies, the papers' best model (Table 1, lower right).")
    if scale == "cpu":  # at paper scale every run goes to convergence anyway
        out["m2m_mono_long"] = recipe(scale, "m2m_mono_long", {"mode": "many2many", "monolingual": True},
                                      "m2m_mono with twice the budget (more training, better sentence vectors and retrieval).",
                                      budget_factor=2)
        out["m2m_mono_xlong"] = recipe(scale, "m2m_mono_xlong", {"mode": "many2many", "monolingual": True},
                                       "m2m_mono with four times the budget (continues m2m_mono_long for retrieval across all pairs).",
                                       budget_factor=4)
    for a, b in PAIRS:
        held = [[a, b], [b, a]]
        out[f"m2m_mono_without_{a}_{b}"] = recipe(scale, f"m2m_mono_without_{a}_{b}",
                                                  {"mode": "many2many", "monolingual": True, "held_out": held},
                                                  f"Leave {a}<->{b} out: zero-shot {a}<->{b} (Figure 2).")
        out[f"ll_m2m_without_{a}_{b}"] = recipe(scale, f"ll_m2m_without_{a}_{b}", {"mode": "many2many", "held_out": held},
                                                f"Language-label model, {a}<->{b} left out (Figure 2, grey).", shared=True)
    out["ll_m2m"] = recipe(scale, "ll_m2m", {"mode": "many2many"},
                           "Language-label baseline (Johnson et al.): one shared encoder/decoder, joint vocabulary, target tag.", shared=True)
    out["m2m_mono_nopenalty"] = recipe(scale, "m2m_mono_nopenalty", {"mode": "many2many", "monolingual": True},
                                       "m2m_mono without the penalty term (Sec. 3.1.4).", train={"penalty_weight": 0.0})
    out["bilingual_en_de_nopenalty"] = recipe(scale, "bilingual_en_de_nopenalty", {"mode": "bilingual", "pairs": [["en", "de"]]},
                                              "Bilingual en->de without the penalty term (Sec. 3.1.4).", train={"penalty_weight": 0.0})
    out["bilingual_en_de_k50_nopenalty"] = recipe(scale, "bilingual_en_de_k50_nopenalty", {"mode": "bilingual", "pairs": [["en", "de"]]},
                                                  "Bilingual en->de, k = 50, without the penalty: the journal's Table 13 pair.",
                                                  bridge={"heads": 50}, train={"penalty_weight": 0.0})
    for k in (1, 25, 50):
        out[f"bilingual_en_de_k{k}"] = recipe(scale, f"bilingual_en_de_k{k}", {"mode": "bilingual", "pairs": [["en", "de"]]},
                                              f"Bilingual en->de with k = {k} bridge heads (Sec. 3.2, Table 2).", bridge={"heads": k})
        out[f"m2m_mono_k{k}"] = recipe(scale, f"m2m_mono_k{k}", {"mode": "many2many", "monolingual": True},
                                       f"m2m_mono with k = {k} bridge heads (Sec. 3.2, Table 3).", bridge={"heads": k})
    return out


def main() -> None:
    for scale in SCALES:
        folder = HERE / "multi30k" / scale
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.yaml"):
            old.unlink()
        for name, r in all_recipes(scale).items():
            comment = r.pop("_comment")
            per_step = SCALES[scale]["seconds_per_step"]
            steps = r["train"]["max_steps"]
            per_direction = steps // n_directions(r["directions"])
            budget = (f"\n# CPU budget: {steps} steps ({per_direction} per direction), "
                      f"about {steps * per_step / 60:.0f} min of training on one core." if per_step else "")
            text = f"# {comment}{budget}\n# Generated by recipes/generate.py; edit that file, not this one.\n"
            (folder / f"{name}.yaml").write_text(text + yaml.safe_dump(r, sort_keys=False))
    print(f"wrote recipes to {HERE / 'multi30k'}")


if __name__ == "__main__":
    main()
