"""What `mathrl vllm-serve` accepts: the limits and the parsing of every request body.

Pure functions (no engine, no sockets), so each rule is tested on its own. A refused request
raises ``RequestError`` with the HTTP status and a reason the client gets back as
``{"error": reason}``. The parsing is strict: JSON without NaN or Infinity, no unknown keys,
integers that are integers (not floats or booleans), every number inside its range. A weight
update must name exactly the served model's tensors with their shapes and the served dtype,
so the bytes that follow are the model's size and no more.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields

from pipeline.rollout.base import SamplingParams
from pipeline.weights.broadcast import Spec

__all__ = ["RequestError", "ServerLimits", "parse_json", "parse_generate", "parse_update", "require_int"]

MAX_BUCKET_BYTES = 1 << 30  # the receive buffer of one bucket (the trainer sends 256 MiB)
MAX_SEED = 2**62  # seed + prompt * n stays inside vLLM's 64-bit generator seed


class RequestError(ValueError):
    """A request the server refuses; ``status`` is the HTTP code, the message goes back to the client."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ServerLimits:
    max_n: int = 256
    max_prompts: int = 1024
    max_new_tokens: int = 2048  # the served vllm_max_model_len
    max_body_bytes: int = 16 << 20
    read_timeout_s: float = 30.0
    max_connections: int = 64  # authenticated ones
    max_unauth_connections: int = 16  # not yet authenticated: the oldest is dropped past this
    auth_timeout_s: float = 2.0  # a connection's time to send the token
    batch_window_s: float = 0.02
    update_timeout_s: float = 600.0  # an announced weight update expires after this
    max_bucket_bytes: int = MAX_BUCKET_BYTES

    @classmethod
    def from_config(cls, r) -> "ServerLimits":
        return cls(max_n=r.server_max_n, max_prompts=r.server_max_prompts, max_new_tokens=r.vllm_max_model_len,
                   max_body_bytes=r.server_max_body_mb << 20, read_timeout_s=r.server_read_timeout_s,
                   max_connections=r.server_max_connections, batch_window_s=r.server_batch_window_s,
                   max_unauth_connections=r.server_max_unauth_connections, auth_timeout_s=r.server_auth_timeout_s,
                   update_timeout_s=r.server_timeout_s)

    def as_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def parse_json(raw: bytes) -> dict:
    """The request body as a JSON object (an empty body is ``{}``)."""
    if not raw:
        return {}
    try:
        body = json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        raise RequestError("the JSON body is nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError, NaN/Infinity, ints of > 4300 digits
        raise RequestError(f"the body is not valid JSON ({e})") from None
    if not isinstance(body, dict):
        raise RequestError(f"the body must be a JSON object, got {type(body).__name__}")
    return body


def _only(body: dict, allowed: set[str], what: str) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise RequestError(f"{what}: unknown key(s) {unknown}; allowed: {sorted(allowed)}")


def require_int(value, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RequestError(f"{name} must be an integer in [{low}, {high}], got {_show(value)}")
    return value


def _number(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RequestError(f"{name} must be a finite number, got {_show(value)}")
    return float(value)


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def parse_generate(body: dict, limits: ServerLimits) -> tuple[list[str], int, SamplingParams, bool]:
    """(prompts, n, params, tools) of a /generate request, or ``RequestError`` naming the bad field.
    ``tools`` (default false): the multi-turn rollout with the server's own tool settings."""
    _only(body, {"prompts", "n", "params", "tools"}, "/generate")
    tools = body.get("tools", False)
    if not isinstance(tools, bool):
        raise RequestError(f"tools must be true or false, got {_show(tools)}")
    prompts = body.get("prompts")
    if not isinstance(prompts, list) or not 1 <= len(prompts) <= limits.max_prompts:
        raise RequestError(f"prompts must be a list of 1 to {limits.max_prompts} strings "
                           f"(rollout.server_max_prompts), got {_show(prompts)}")
    if not all(isinstance(p, str) for p in prompts):
        raise RequestError("prompts must all be strings")
    n = require_int(body.get("n"), "n (rollout.server_max_n)", 1, limits.max_n)
    params = body.get("params", {})
    if not isinstance(params, dict):
        raise RequestError("params must be a JSON object")
    _only(params, {f.name for f in fields(SamplingParams)}, "params")
    default = SamplingParams()
    max_new = require_int(params.get("max_new_tokens", min(default.max_new_tokens, limits.max_new_tokens)),
                          "params.max_new_tokens (the server's rollout.vllm_max_model_len)", 1, limits.max_new_tokens)
    temperature = _number(params.get("temperature", default.temperature), "params.temperature")
    if temperature < 0:
        raise RequestError(f"params.temperature must be >= 0 (0 = greedy), got {temperature}")
    top_p = _number(params.get("top_p", default.top_p), "params.top_p")
    if not 0 < top_p <= 1:
        raise RequestError(f"params.top_p must lie in (0, 1], got {top_p}")
    top_k = require_int(params.get("top_k", default.top_k), "params.top_k (0 = off)", 0, 2**31 - 1)
    seed = params.get("seed")
    if seed is not None:
        seed = require_int(seed, "params.seed", 0, MAX_SEED)
    logprobs = params.get("logprobs", default.logprobs)
    if not isinstance(logprobs, bool):
        raise RequestError(f"params.logprobs must be true or false, got {_show(logprobs)}")
    return prompts, n, SamplingParams(max_new_tokens=max_new, temperature=temperature, top_p=top_p,
                                      top_k=top_k, seed=seed, logprobs=logprobs), tools


def _spec(item, i: int) -> Spec:
    if not isinstance(item, list) or len(item) != 3:
        raise RequestError(f"specs[{i}] must be [name, dtype, shape]")
    name, dtype, shape = item
    if not isinstance(name, str) or not isinstance(dtype, str) or not isinstance(shape, list) or len(shape) > 8:
        raise RequestError(f"specs[{i}] must be [name (string), dtype (string), shape (list of at most 8 sizes)]")
    return Spec(name, dtype, tuple(require_int(d, f"specs[{i}] shape", 0, 2**40) for d in shape))


def parse_update(body: dict, served: list[tuple[str, tuple[int, ...]]], dtype: str,
                 limits: ServerLimits) -> tuple[int, int, list[Spec], int, int]:
    """(update id, generation, specs, bucket bytes, total bytes) of a /update_weights request.
    The specs must be the served model's tensors (names, shapes) in the served ``dtype``, each
    once; the total bytes are then the served model's."""
    _only(body, {"generation", "update", "specs", "bucket_bytes"}, "/update_weights")
    generation = require_int(body.get("generation"), "generation", 1, 2**62)
    update = require_int(body.get("update"), "update", 0, 2**62)
    bucket = require_int(body.get("bucket_bytes"), "bucket_bytes", 1, limits.max_bucket_bytes)
    items = body.get("specs")
    if not isinstance(items, list) or len(items) != len(served):
        raise RequestError(f"specs must list the served model's {len(served)} tensors, "
                           f"got {len(items) if isinstance(items, list) else _show(items)}")
    specs = [_spec(item, i) for i, item in enumerate(items)]
    want = dict(served)
    seen = set()
    for s in specs:
        if s.name not in want:
            raise RequestError(f"the served model has no tensor {_show(s.name)}")
        if s.name in seen:
            raise RequestError(f"tensor {_show(s.name)} is listed twice")
        seen.add(s.name)
        if s.shape != tuple(want[s.name]):
            raise RequestError(f"tensor {s.name} has shape {list(want[s.name])} on the server, not {list(s.shape)}")
        if s.dtype != dtype:
            raise RequestError(f"tensor {s.name} must be sent as the served dtype {dtype}, not {_show(s.dtype)}")
    return update, generation, specs, bucket, sum(s.nbytes for s in specs)
