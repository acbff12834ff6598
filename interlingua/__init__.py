"""interlingua: multilingual NMT through a shared, language-agnostic attention bridge."""

__version__ = "0.1.0"
