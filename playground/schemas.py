"""Request bodies of the API and the one error shape, `{"error", "field"}`, of every refusal (docs/en/playground.md).

Design choices:
- Pydantic in strict mode: `"300"` for a number, NaN and infinities are refused, not guessed; an unknown key is named.
- Ranges reuse `check_sampling_args` one field at a time: the API says what `generate.py` says, each about one field."""

from __future__ import annotations

import json
import math
from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from common.config_checks import MAX_SEED
from model.sampling import check_sampling_args

NEUTRAL = {"max_new_tokens": 0, "temperature": 1.0, "top_k": None, "top_p": None}  # check_sampling_args's arguments


class ApiError(Exception):
    def __init__(self, status: int, field: str | None, message: str):
        super().__init__(message)
        self.status, self.field, self.message = status, field, message

    def body(self) -> dict:
        return json_safe({"error": self.message, "field": self.field})


def json_safe(value: Any) -> Any:
    """`value` as JSON can hold it: non-finite floats become null and lone surrogates (\\ud800) are escaped."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {json_safe(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def dumps(value: Any) -> str:
    return json.dumps(json_safe(value), ensure_ascii=False, allow_nan=False, separators=(",", ":"))


class SafeJSONResponse(JSONResponse):
    """Every JSON answer of the app: through `json_safe`, never NaN, never unencodable."""

    def render(self, content: Any) -> bytes:
        return dumps(content).encode("utf-8")


def _unicode(v: str | None, info: ValidationInfo) -> str | None:
    """Refuse text with lone surrogates (JSON can spell \\ud800, but it is no character and cannot be encoded)."""
    if v is not None:
        try:
            v.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(
                f"{info.field_name} has a lone surrogate (U+{ord(v[e.start]):04X} at character "
                f"{e.start}), which is not a character: send valid Unicode text"
            ) from None
    return v


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class GenerateRequest(_Strict):
    run: str | None = None  # a name from GET /api/runs; null = the default run
    prompt: str = ""
    max_new_tokens: int = 300
    temperature: float = 0.8  # 0 = greedy
    top_k: int | None = None
    top_p: float | None = None
    seed: int = Field(1337, ge=0, le=MAX_SEED)
    stream: bool = True  # Server-Sent Events; false = one JSON object at the end

    _text = field_validator("run", "prompt")(_unicode)

    @field_validator(*NEUTRAL)
    @classmethod
    def _sampling_range(cls, v: Any, info: ValidationInfo) -> Any:
        check_sampling_args(**{**NEUTRAL, info.field_name: v})  # its ValueError is pydantic's, message as it is
        return v

    def check_limits(self, max_new_tokens_limit: int, max_prompt_chars: int) -> None:
        """The server's caps, which depend on its config."""
        if self.max_new_tokens > max_new_tokens_limit:
            raise ApiError(
                422,
                "max_new_tokens",
                f"max_new_tokens must be <= {max_new_tokens_limit} on this "
                f"server (serve.py max_new_tokens_limit=...), got {self.max_new_tokens}",
            )
        if len(self.prompt) > max_prompt_chars:
            raise ApiError(
                422,
                "prompt",
                f"prompt is too long: {len(self.prompt)} characters, this server takes "
                f"at most {max_prompt_chars} (serve.py max_prompt_chars=...)",
            )


class AttentionRequest(_Strict):
    run: str | None = None
    text: str = Field(min_length=1)
    position: int | None = None  # a token index in text; null = the last token

    _text = field_validator("run", "text")(_unicode)

    def check_limits(self, max_chars: int) -> None:
        if len(self.text) > max_chars:
            raise ApiError(422, "text", f"text is too long: {len(self.text)} characters, at most {max_chars}")


def validation_error(exc: RequestValidationError) -> ApiError:
    """Pydantic's list of errors as one line naming the first bad field."""
    err = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request", "type": ""}
    loc = [str(p) for p in err.get("loc", ())]
    field = loc[1] if len(loc) > 1 and loc[0] == "body" and err.get("type") != "json_invalid" else None
    msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    if err.get("type") == "extra_forbidden":
        return ApiError(422, field, f"unknown field {field!r}; check its spelling")
    if err.get("type") == "json_invalid":
        return ApiError(422, None, "the request body is not valid JSON")
    if field is None:
        return ApiError(422, None, f"the request body must be a JSON object ({msg})")
    return ApiError(422, field, msg if msg.startswith(field) else f"{field}: {msg}")
