"""One registry per model slot: the config's `type` -> the kind's module class and config class.

A kind is one module that registers its class with its config beside it:

    class GRUEncoderConfig(KindConfig):
        type: Literal["gru"] = "gru"
        hidden: int = 512

    @ENCODERS.register("gru", config=GRUEncoderConfig)
    class GRUEncoder(Encoder): ...

    ENCODERS.build(cfg.encoder, vocab_size=..., embed_dim=..., dropout=...)

Registering also adds the config class to its slot's `KindConfigs` (`interlingua.config`), from
which the slot's config type is read, so `model.encoder.type: gru` then validates. Built-in kinds
are found by importing every module of `interlingua.config.KIND_PACKAGES` (no list names them);
a user's own kind modules are listed in the config's `model.kind_modules`.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from interlingua.config import BRIDGE_KINDS, DECODER_KINDS, ENCODER_KINDS, KindConfig, KindConfigs, discover_kinds
from interlingua.modules.base import Bridge, Decoder, Encoder, Kind

K = TypeVar("K", bound=Kind)


class Registry(Generic[K]):
    def __init__(self, slot: str, base: type[K], configs: KindConfigs | None = None):
        """`configs`: the slot's config classes that registering fills (a registry of its own by default)."""
        self.slot, self.base = slot, base
        self.configs = configs if configs is not None else KindConfigs(slot)
        self._kinds: dict[str, type[K]] = {}

    def register(self, name: str, *, config: type[KindConfig]) -> Callable[[type[K]], type[K]]:
        """Class decorator: make `name` (the config's `type`) validate with `config` and build this class."""

        def add(cls: type[K]) -> type[K]:
            if not (isinstance(cls, type) and issubclass(cls, self.base)):
                raise TypeError(f"{self.slot} kind '{name}' must subclass {self.base.__name__}")
            if self._kinds.get(name, cls) is not cls:
                raise ValueError(f"{self.slot} kind '{name}' is already registered ({self._kinds[name].__name__})")
            self.configs.add(name, config)
            cls.kind = name
            self._kinds[name] = cls
            return cls

        return add

    def names(self) -> list[str]:
        discover_kinds()
        return sorted(self._kinds)

    def get(self, name: str) -> type[K]:
        discover_kinds()
        try:
            return self._kinds[name]
        except KeyError:
            raise KeyError(f"no {self.slot} kind '{name}' (registered: {', '.join(sorted(self._kinds))})") from None

    def build(self, cfg: KindConfig, **context: Any) -> K:
        """The module of kind `cfg.type`, built from `cfg` and the model's `context`."""
        module = self.get(cfg.type).from_config(cfg, **context)
        return module  # type: ignore[return-value]


# the abstract bases are only used in issubclass checks (mypy wants a concrete class for type[K])
ENCODERS: Registry[Encoder] = Registry("encoder", Encoder, ENCODER_KINDS)  # type: ignore[type-abstract]
BRIDGES: Registry[Bridge] = Registry("bridge", Bridge, BRIDGE_KINDS)  # type: ignore[type-abstract]
DECODERS: Registry[Decoder] = Registry("decoder", Decoder, DECODER_KINDS)  # type: ignore[type-abstract]
