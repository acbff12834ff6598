"""One registry per model slot: the config's `type` -> the module class of that kind.

    @ENCODERS.register("bilstm")
    class BiLSTMEncoder(Encoder): ...

    ENCODERS.build(cfg.encoder, vocab_size=..., embed_dim=..., dropout=...)

The built-in kinds live in encoders.py, bridges.py and decoders.py and are registered the
first time a registry is asked for a kind.
"""
from __future__ import annotations

from typing import Any, Callable, Generic, TypeVar

from interlingua.config import KindConfig
from interlingua.modules.base import Bridge, Decoder, Encoder, Kind

K = TypeVar("K", bound=Kind)


class Registry(Generic[K]):
    def __init__(self, slot: str, base: type[K]):
        self.slot, self.base = slot, base
        self._kinds: dict[str, type[K]] = {}

    def register(self, name: str) -> Callable[[type[K]], type[K]]:
        """Class decorator: make `name` (the config's `type`) build this class."""

        def add(cls: type[K]) -> type[K]:
            if not (isinstance(cls, type) and issubclass(cls, self.base)):
                raise TypeError(f"{self.slot} kind '{name}' must subclass {self.base.__name__}")
            if self._kinds.get(name, cls) is not cls:
                raise ValueError(f"{self.slot} kind '{name}' is already registered ({self._kinds[name].__name__})")
            cls.kind = name
            self._kinds[name] = cls
            return cls

        return add

    def names(self) -> list[str]:
        _load_builtin_kinds()
        return sorted(self._kinds)

    def get(self, name: str) -> type[K]:
        _load_builtin_kinds()
        try:
            return self._kinds[name]
        except KeyError:
            raise KeyError(f"no {self.slot} kind '{name}' (registered: {', '.join(sorted(self._kinds))})") from None

    def build(self, cfg: KindConfig, **context: Any) -> K:
        """The module of kind `cfg.type`, built from `cfg` and the model's `context`."""
        module = self.get(cfg.type).from_config(cfg, **context)
        return module  # type: ignore[return-value]


ENCODERS: Registry[Encoder] = Registry("encoder", Encoder)
BRIDGES: Registry[Bridge] = Registry("bridge", Bridge)
DECODERS: Registry[Decoder] = Registry("decoder", Decoder)

_loaded = False


def _load_builtin_kinds() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        from interlingua.modules import bridges, decoders, encoders, ntdv, transformer  # noqa: F401  (their classes register)
