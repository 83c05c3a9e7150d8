"""Values <-> tagged JSON (old import path): the encoder is ``nbagent.store.encoder``, the
decoder ``nbagent.store.decoder``, the type allow-list ``nbagent.allowlist``. The names this
module always had stay importable from here."""

from __future__ import annotations

from nbagent.allowlist import (
    _ALLOWED,
    _RESOLVED,
    NotAllowedError,
    PersistError,
    _is_nbagent,
    _ref_of,
    _resolve,
    allow_type,
    is_allowed_class,
)
from nbagent.store.decoder import _TAGS, ValueDecoder, _need, _str, memory_tokenizer
from nbagent.store.encoder import (
    _AS_IS,
    _HANDLERS,
    _MODEL_PLANS,
    SHARED_STR_CHARS,
    Path_,
    ValueEncoder,
    _handler_for,
    _is_plain_default,
    _model_plan,
    _path_text,
    _strip_unused,
)

_Encoder = ValueEncoder
_Decoder = ValueDecoder

__all__ = ["PersistError", "NotAllowedError", "allow_type", "is_allowed_class", "ValueEncoder", "ValueDecoder"]
