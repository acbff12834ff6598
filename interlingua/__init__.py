"""interlingua: multilingual NMT through a shared, language-agnostic attention bridge.

>>> import interlingua
>>> model = interlingua.load("runs/demo/best.pt", device="auto")
>>> model.translate(["a dog runs."], src="en", tgt="de", beam=5)
>>> model.encode(["a dog runs."], lang="en")        # (1, d) float32 sentence vectors
"""

from interlingua.allocator import tune_allocator

__version__ = "0.1.0"

__all__ = ["load", "Model", "Languages", "Representation", "tune_allocator", "__version__"]


def __getattr__(name: str):
    # Lazy so that `import interlingua` (and the CLI's --help) does not import torch.
    if name in ("load", "Model", "Languages", "Representation"):
        from interlingua.inference import api
        return getattr(api, name)
    raise AttributeError(name)
