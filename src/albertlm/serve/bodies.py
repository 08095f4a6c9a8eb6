"""The request bodies of `albertlm serve`: read within --max-body-bytes, checked whole, refused in one line.

    POST /predict         {"inputs": "text" | ["text", ["text_a", "text_b"], ...]}
    POST /embed           {"inputs": "text" | ["text", ...], "normalize": true | false}    (TEI's shape)
    POST /v1/embeddings   {"input": "text" | ["text", ...], "model": "...", "encoding_format": "float" | "base64",
                           "user": "..."}                                                    (OpenAI's shape)

A refusal is a `RequestError`: 413 for a body over --max-body-bytes or more than --max-inputs inputs, 422
for anything else that is not the shape above, naming the field (`inputs[2]: expected a string`). No
server package is imported here.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

import numpy as np


class RequestError(Exception):
    """A request refused with `status` and a one-line message."""

    def __init__(self, status: int, message: str, error_type: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.error_type, self.headers = status, message, error_type, headers


def invalid(message: str) -> RequestError:
    """A 422 for a body that is not what the route takes."""
    return RequestError(422, message, "validation")


# ---------------------------------------------------------------------------- reading
async def read_body(request, limit: int) -> bytes:
    """The body of a starlette `request`, refused with 413 as soon as it is known to exceed `limit` bytes
    (from Content-Length or while reading a chunked one)."""
    too_long = RequestError(413, f"body: longer than {limit:,} bytes (--max-body-bytes)", "payload_too_large",
                            {"Connection": "close"})
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise too_long
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_long
    return bytes(body)


def json_object(body: bytes, required: str, fields: tuple[str, ...]) -> dict[str, Any]:
    """The body as a JSON object holding `required` and no field outside `fields`.

    Raises:
        RequestError: 422, naming the byte, line and column, or the field.
    """
    try:
        data = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise invalid(f"body: not valid UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise invalid(f"body: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    if not isinstance(data, dict) or required not in data:
        raise invalid(f'body: expected a JSON object {{"{required}": ...}}')
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise invalid(f"body: unknown field {unknown[0]!r} (the body takes only {', '.join(fields)})")
    return data


def _listed(data: dict[str, Any], field: str, max_inputs: int, expected: str) -> tuple[list, bool]:
    """The inputs of `field` (a single one or a list) and whether it was a single one."""
    value = data[field]
    if not isinstance(value, (str, list)):
        raise invalid(f"{field}: expected {expected}")
    items = [value] if isinstance(value, str) else value
    if len(items) > max_inputs:
        raise RequestError(413, f"{field}: {len(items)} inputs; a request takes at most {max_inputs} (--max-inputs)",
                           "payload_too_large")
    return items, isinstance(value, str)


# ---------------------------------------------------------------------------- /predict
def parse_inputs(body: bytes, max_inputs: int) -> tuple[list[str], bool]:
    """The input lines of a /predict body (a pair becomes `text_a<TAB>text_b`, as predict reads it), and
    whether the body held a single input (answered by one object rather than a list).

    Raises:
        RequestError: 422 naming the field, 413 for more than `max_inputs` inputs.
    """
    data = json_object(body, "inputs", ("inputs",))
    items, single = _listed(data, "inputs", max_inputs, "a string, or a list of strings and pairs of strings")
    return [_line(i, item) for i, item in enumerate(items)], single


def _line(index: int, item: Any) -> str:
    where = f"inputs[{index}]"
    if isinstance(item, list) and len(item) == 2 and all(isinstance(t, str) for t in item):
        for k, text in enumerate(item):
            if "\t" in text:
                raise invalid(f"{where}[{k}]: a text of a pair must not hold a tab")
        line = "\t".join(item)
    elif isinstance(item, str):
        line = item
    else:
        raise invalid(f"{where}: expected a string or a pair of strings")
    if not line.strip():
        raise invalid(f"{where}: an empty text (nothing to predict)")
    return line


# ---------------------------------------------------------------------------- the embedding routes
@dataclass(frozen=True)
class EmbedRequest:
    """What an embedding request asks for."""

    texts: list[str]
    """The texts, in order (an empty one gets the vector of `[CLS] [SEP]`, as `albertlm embed` gives it)."""
    normalize: bool | None = None
    """Unit-length vectors; None: the server's default."""
    model: str | None = None
    """/v1/embeddings: the `model` the client named (echoed back)."""
    base64: bool = False
    """/v1/embeddings: each vector as base64 of its float32 little-endian bytes (`encoding_format`)."""


def _texts(data: dict[str, Any], field: str, max_inputs: int) -> list[str]:
    items, _ = _listed(data, field, max_inputs, "a string or a list of strings")
    for i, item in enumerate(items):
        if not isinstance(item, str):  # OpenAI's input may be token ids, an int or a list of ints per input
            ids = field == "input" and (isinstance(item, int) or (isinstance(item, list) and item
                                                                  and all(isinstance(t, int) for t in item)))
            raise invalid(f"{field}[{i}]: expected a string" + (" (token ids are not taken: send the text)"
                                                                 if ids else ""))
    return items


def parse_embed(body: bytes, max_inputs: int) -> EmbedRequest:
    """A /embed body (text-embeddings-inference's shape).

    Raises:
        RequestError: 422 naming the field, 413 for more than `max_inputs` inputs.
    """
    data = json_object(body, "inputs", ("inputs", "normalize"))
    normalize = data.get("normalize")
    if normalize is not None and not isinstance(normalize, bool):
        raise invalid("normalize: expected true or false")
    return EmbedRequest(_texts(data, "inputs", max_inputs), normalize)


def parse_openai(body: bytes, max_inputs: int) -> EmbedRequest:
    """A /v1/embeddings body (OpenAI's shape; `user` is taken and ignored).

    Raises:
        RequestError: 422 naming the field, 413 for more than `max_inputs` inputs.
    """
    data = json_object(body, "input", ("input", "model", "encoding_format", "user"))
    for name in ("model", "user"):
        if data.get(name) is not None and not isinstance(data[name], str):
            raise invalid(f"{name}: expected a string")
    encoding = data.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise invalid(f"encoding_format: expected \"float\" or \"base64\", got {json.dumps(encoding)[:40]}")
    return EmbedRequest(_texts(data, "input", max_inputs), model=data.get("model"), base64=encoding == "base64")


def openai_answer(request: EmbedRequest, vectors: np.ndarray, tokens: int, served: str) -> dict[str, Any]:
    """The /v1/embeddings answer: OpenAI's list object, `usage` counting the tokens embedded ([CLS] and [SEP]
    included, after truncation), `model` the one the client named (else `served`)."""
    def encoded(v: np.ndarray):
        if request.base64:
            return base64.b64encode(np.ascontiguousarray(v, dtype="<f4").tobytes()).decode("ascii")
        return v.tolist()

    return {"object": "list",
            "data": [{"object": "embedding", "index": i, "embedding": encoded(v)} for i, v in enumerate(vectors)],
            "model": request.model or served, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
