"""Request and response bodies of the HTTP service.

They are the contract a client codes against, so they live apart from the handlers, and FastAPI
turns them into the OpenAPI description at /docs. Requests are strict (no "5" for 5, no unknown
fields) so that a typo is an error naming the field, not a silently ignored setting.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

from interlingua.data.inputs import text_problem
from interlingua.inference.api import DirectRoute
from interlingua.serving.model_calls import Pooling

TranslationRoute = Literal[DirectRoute, "pivot"]
"""How a translation went: a trained direction, a zero-shot one, or through a pivot language (a direction
itself is a (src, tgt) pair, `interlingua.data.directions.Direction`). Every answer names it `route`."""


def _valid_unicode(value: str) -> str:
    """JSON may carry a lone UTF-16 surrogate (`"\\ud800"`), which Python decodes into a str that no
    tokenizer, log line or JSON answer can encode: refused as the field's own 422, before a handler
    echoes it into a message or a response."""
    problem = text_problem(value)
    if problem is not None:
        raise PydanticCustomError("invalid_unicode", problem.removeprefix("is "))
    return value


Str = Annotated[str, AfterValidator(_valid_unicode)]
"""Every string of a request (a text, a language code, a model name): valid Unicode, or a 422 naming
the field (and the item of a list: `body.tgts.1`)."""


def _whole(value: object) -> object:
    """JSON has one kind of number, and JSON Schema's `integer` is any number without a fraction: `2.0`
    (as encoders that write every number as a float send it) is the integer 2. A fraction, a string
    ("2") and a boolean stay refused by the strict `int` after this."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


Int = Annotated[int, BeforeValidator(_whole)]
"""A whole number of a request: `2` or `2.0`."""


def _unchecked_strings(schema: object) -> bool:
    """Whether a pydantic core schema takes a string anywhere without `_valid_unicode`."""
    if isinstance(schema, dict):
        if schema.get("type") == "function-after" and schema.get("function", {}).get("function") is _valid_unicode:
            return False
        return schema.get("type") == "str" or any(_unchecked_strings(part) for part in schema.values())
    if isinstance(schema, list):
        return any(_unchecked_strings(part) for part in schema)
    return False


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """A request field declared `str` instead of `Str` is refused when the class is made, so that no
        string of a request reaches a handler unchecked."""
        super().__pydantic_init_subclass__(**kwargs)
        unchecked = [name for name, field in cls.__pydantic_core_schema__["schema"]["fields"].items()
                     if _unchecked_strings(field)]
        if unchecked:
            raise TypeError(f"{cls.__name__}: declare the string fields {', '.join(unchecked)} as Str, not str")


class TranslateRequest(_Request):
    texts: list[Str] = Field(description="Sentences to translate; an empty string gives an empty translation.",
                             examples=[["A man is riding a bicycle."]])
    src: Str = Field(description="Source language code (GET /languages).", examples=["en"])
    tgt: Str | None = Field(None, description="Target language code (give `tgt` or `tgts`).", examples=["de"])
    tgts: list[Str] | None = Field(
        None, description="Several target languages instead of `tgt`: each text is encoded once and written out "
                          "in every one of them; the answer holds one result per target, in this order.",
        examples=[["de", "fr"]])
    beam: Int = Field(1, ge=1, le=10, description="Beam size; 1 is greedy search.")
    beam_stop: Literal["all", "top"] = Field(
        "all", description="When beam search is done with a sentence: all (once it has `beam` finished hypotheses) or "
                           "top (also once a step's best candidate is finished: faster, slightly lower BLEU).")
    pivot: Str | None = Field(None, description="Translate src -> pivot -> tgt (a pivot equal to src or tgt: "
                                                "the direct translation); with `tgts`, for every target.")
    no_repeat_ngram: Int = Field(0, ge=0, le=16, description="No n-gram of this many subwords twice in an output "
                                                             "(ends repetition loops); 0: off.")
    compare_pivot: bool = Field(False, description="With `tgt` and no `pivot`: where src -> tgt is a zero-shot "
                                                   "direction, also translate through the model's pivot for it (GET "
                                                   "/directions) and answer both (`through_pivot`).")


TRUNCATED_DESCRIPTION = ("Only where some were: the indices of `texts` longer than the model reads (its `max_len` "
                         "subwords), of which only the beginning was used; split such texts into sentences.")
"""`truncated` of the /translate and /embed answers."""


class TranslateResponse(BaseModel):
    translations: list[str]
    src: str
    tgt: str
    pivot: str | None = Field(description="The language translated through, or null for a direct translation.")
    route: TranslationRoute = Field(description="supervised: a trained direction; zero-shot: never trained "
                                                "together; pivot: through `pivot`.")
    direction: TranslationRoute = Field(description="Deprecated: the same as `route`, under its former name; "
                                                    "read `route`.", deprecated=True)
    through_pivot: PivotTranslations | None = Field(
        None, description="With `compare_pivot`: the same texts through the model's pivot for a zero-shot "
                          "direction (null where the direction is not zero-shot or has no pivot); absent otherwise.")
    truncated: list[int] = Field(default_factory=list, description=TRUNCATED_DESCRIPTION)


class PivotTranslations(BaseModel):
    """The same texts through a pivot language, beside the direct translation (`compare_pivot`)."""

    pivot: str = Field(description="The language translated through.")
    translations: list[str]


class TranslateTargetsResponse(BaseModel):
    """The answer to a request with `tgts`."""

    src: str
    results: list[TranslateResponse] = Field(description="Per target of `tgts`, in order: what the same request "
                                                         "with that one `tgt` answers.")


class EmbedRequest(_Request):
    texts: list[Str] = Field(description="Sentences to embed; an empty string gives a vector of zeros.",
                             examples=[["A man is riding a bicycle."]])
    lang: Str = Field(description="Language of every text (GET /languages).", examples=["en"])
    pooling: Pooling = Field("mean", description="mean: one (dim,) vector per text; heads: (heads, dim) per "
                                                 "text, one vector per attention-bridge head.")


class EmbedResponse(BaseModel):
    vectors: list[list[float]] | list[list[list[float]]]
    dim: int
    truncated: list[int] = Field(default_factory=list, description=TRUNCATED_DESCRIPTION)


class OpenAIEmbeddingRequest(_Request):
    """The OpenAI embeddings request, plus `language`."""

    input: Str | list[Str] = Field(description="A text or a list of texts.", examples=["A man is riding a bicycle."])
    model: Str = Field(description="Echoed back; the service serves the one model it was started with.",
                       examples=["interlingua"])
    language: Str | None = Field(None, description="Language of every text; when absent, each text's language "
                                                   "is identified among the model's languages.")
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="float: lists of numbers; base64: little-endian float32 bytes (the OpenAI clients' "
                             "default).")
    user: Str | None = Field(None, description="Accepted for compatibility and ignored.")


class EmbeddingObject(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str
    language: str = Field(description="The language whose encoder embedded the text (given or identified).")


class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class OpenAIEmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingObject]
    model: str
    usage: Usage


class HealthResponse(BaseModel):
    status: Literal["ok"] = "ok"
    model: str
    languages: list[str]


LanguagePair = Annotated[list[str], Field(min_length=2, max_length=2)]
"""A direction, [source, target]: a two-item array, not a tuple, whose JSON Schema (`prefixItems`) not every
OpenAPI tool reads."""


class LanguagesResponse(BaseModel):
    languages: list[str] = Field(description="Languages the model reads (translate from, embed).")
    targets: list[str] = Field(description="Languages the model writes (translate into).")
    trained: list[LanguagePair] = Field(description="The directions the model was trained on.")
    zero_shot: list[LanguagePair] = Field(description="The directions between its languages it never trained.")


class DirectionInfo(BaseModel):
    src: str
    tgt: str
    route: DirectRoute = Field(description="supervised: trained; zero-shot: the model has this encoder and decoder "
                                           "but never trained them together (the values of POST /translate's "
                                           "`route`).")
    kind: DirectRoute = Field(description="Deprecated: the same as `route`, under its former name; read `route`.",
                              deprecated=True)
    pivot: str | None = Field(description="A language with both legs trained (src -> pivot and pivot -> tgt), to "
                                          "translate a zero-shot direction through (POST /translate with `pivot`); "
                                          "the hub of the trained directions first; null where none has both.")


class DirectionsResponse(BaseModel):
    directions: list[DirectionInfo] = Field(description="Every source -> target pair of two different languages.")


class ModelInfoResponse(BaseModel):
    model: str
    languages: list[str] = Field(description="Languages the model reads.")
    targets: list[str] = Field(description="Languages the model writes.")
    encoder: str = Field(description="The encoder kind (bilstm, transformer).")
    bridge: str = Field(description="The bridge kind (attention, none, ntdv).")
    heads: int | None = Field(description="k, the bridge's heads; null where the memory follows the sentence length.")
    bridge_attention: bool = Field(description="Whether POST /attention returns the bridge's attention.")
    self_attention_layers: int = Field(description="Encoder layers with self-attention that POST /attention "
                                                   "returns (0 for a BiLSTM).")
    max_texts: int = Field(description="Texts one request may send.")
    max_chars: int = Field(description="Characters one text may have.")


class AttentionRequest(_Request):
    text: Str = Field(description="One sentence (not empty).", examples=["A man is riding a bicycle."])
    lang: Str = Field(description="Its language (GET /languages).", examples=["en"])
    layer: Int | None = Field(None, ge=1, description="Encoder layer whose self-attention to return, 1 the first; "
                                                      "default the last. Only for encoders with self-attention "
                                                      "(GET /model: self_attention_layers).")


class AttentionResponse(BaseModel):
    tokens: list[str] = Field(description="The n subwords the encoder reads (a shared model's <2xx> tag first).")
    lang: str
    bridge: list[list[float]] | None = Field(description="(k, n) bridge attention: each head's weights over the "
                                                         "tokens (a row sums to 1); null without an attention bridge.")
    layer: int | None = Field(description="The layer of `self_attention`; null without one.")
    layers: int = Field(description="Encoder layers with self-attention (0 for a BiLSTM).")
    self_attention: list[list[list[float]]] | None = Field(
        description="(heads, n, n) self-attention of `layer`: row p is what token p attends to (it sums to 1); "
                    "null for an encoder without self-attention.")


class SimilarityRequest(_Request):
    texts: list[Str] = Field(description="Sentences, any mix of languages (none empty).",
                             examples=[["A dog runs.", "Ein Hund rennt."]])
    langs: list[Str] = Field(description="The language of each text, in the same order.", examples=[["en", "de"]])


class SimilarityResponse(BaseModel):
    similarity: list[list[float]] = Field(description="(n, n) cosine similarity of the texts' sentence vectors "
                                                      "(mean pooling, as POST /embed); symmetric, 1 on the diagonal.")
    langs: list[str]


class ErrorDetail(BaseModel):
    message: str
    field: str | None = Field(description="The request part at fault, e.g. body.texts.3, or null.")


class ErrorResponse(BaseModel):
    error: ErrorDetail
