"""interlingua: multilingual NMT through a shared, language-agnostic attention bridge."""

__version__ = "0.1.0"

__all__ = ["Translator", "Embedder", "__version__"]


def __getattr__(name: str):
    # Lazy so that `import interlingua` (and the CLI's --help) does not import torch.
    if name == "Translator":
        from interlingua.inference.translator import Translator
        return Translator
    if name == "Embedder":
        from interlingua.inference.embedder import Embedder
        return Embedder
    raise AttributeError(name)
