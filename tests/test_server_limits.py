"""What `mathrl vllm-serve` accepts, rule by rule, without a server: request parsing and limits
(pipeline/rollout/server_limits.py), the token (server_auth.py), the server's config keys, and
the weight group's store operations (pipeline/weights/group_store.py)."""

from __future__ import annotations

import json

import pytest
import torch.distributed as dist

from pipeline.config import ConfigError, load_run_config
from pipeline.rollout.server_auth import TOKEN_ENV, TokenError, authorized, bearer, server_token
from pipeline.rollout.server_limits import RequestError, ServerLimits, parse_generate, parse_json, parse_update
from pipeline.weights.group_store import MAX_KEYS, MAX_VALUE_BYTES, serve_store_op

LIMITS = ServerLimits(max_n=16, max_prompts=8, max_new_tokens=512)
OK = {"prompts": ["a", "b"], "n": 4, "params": {"max_new_tokens": 32, "temperature": 0.7, "top_p": 0.9,
                                                "top_k": 5, "seed": 11}}
SERVED = [("model.embed.weight", (10, 4)), ("model.norm.weight", (4,))]


def _with(path: str, value):
    body = json.loads(json.dumps(OK))
    *outer, last = path.split(".")
    target = body
    for key in outer:
        target = target[key]
    target[last] = value
    return body


def test_a_good_request_parses():
    prompts, n, params, tools = parse_generate(OK, LIMITS)
    assert prompts == ["a", "b"] and n == 4 and tools is False
    assert (params.max_new_tokens, params.temperature, params.top_p, params.top_k, params.seed) == (32, 0.7, 0.9, 5, 11)
    _, _, default, _ = parse_generate({"prompts": ["x"], "n": 1}, LIMITS)
    assert default.temperature == 1.0 and default.seed is None and default.logprobs is False
    _, _, asked, tools = parse_generate({**OK, "tools": True, "params": {"logprobs": True}}, LIMITS)
    assert tools is True and asked.logprobs is True


@pytest.mark.parametrize("path,value,reason", [
    ("n", 1e9, r"n \(rollout.server_max_n\) must be an integer in \[1, 16\], got 1000000000.0"),
    ("n", 10**9, r"n .* \[1, 16\]"),
    ("n", 0, r"n .* \[1, 16\]"),
    ("n", True, r"n .* got True"),
    ("n", "4", r"n .* got '4'"),
    ("prompts", ["p"] * 1000, r"prompts must be a list of 1 to 8 strings \(rollout.server_max_prompts\)"),
    ("prompts", [], r"prompts must be a list of 1 to 8"),
    ("prompts", "one prompt", r"prompts must be a list"),
    ("prompts", ["ok", 7], r"prompts must all be strings"),
    ("params.max_new_tokens", 10**9,
     r"params.max_new_tokens \(the server's rollout.vllm_max_model_len\) .* \[1, 512\]"),
    ("params.max_new_tokens", 0, r"params.max_new_tokens"),
    ("params.temperature", -5, r"params.temperature must be >= 0 \(0 = greedy\), got -5.0"),
    ("params.temperature", "hot", r"params.temperature must be a finite number"),
    ("params.top_p", 7, r"params.top_p must lie in \(0, 1\], got 7.0"),
    ("params.top_p", 0, r"params.top_p must lie in \(0, 1\], got 0.0"),
    ("params.top_k", -1, r"params.top_k \(0 = off\)"),
    ("params.seed", -1, r"params.seed must be an integer in \[0, "),
    ("params.seed", 2**64, r"params.seed"),
    ("params.logprobs", 1, r"params.logprobs must be true or false, got 1"),
    ("tools", "yes", r"tools must be true or false, got 'yes'"),
    ("params.beam_width", 4, r"params: unknown key\(s\) \['beam_width'\]"),
    ("extra", 1, r"/generate: unknown key\(s\) \['extra'\]"),
    ("params", [1], r"params must be a JSON object"),
])
def test_every_bad_generate_field_is_refused_with_its_reason(path, value, reason):
    with pytest.raises(RequestError, match=reason) as err:
        parse_generate(_with(path, value), LIMITS)
    assert err.value.status == 400


@pytest.mark.parametrize("raw,reason", [
    (b'{"n": NaN}', "not valid JSON"),
    (b'{"t": Infinity}', "not valid JSON"),
    (b'{"t": -Infinity}', "not valid JSON"),
    (b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
    (b'{"n": ' + b"9" * 100_000 + b"}", "not valid JSON"),
    (b"[1, 2]", "must be a JSON object, got list"),
    (b'"text"', "must be a JSON object"),
    (b"\xff\xfe{}", "not valid JSON"),
    (b'{"a": 1', "not valid JSON"),
])
def test_json_bombs_and_non_json_are_refused(raw, reason):
    with pytest.raises(RequestError, match=reason):
        parse_json(raw)


def test_a_huge_float_is_not_a_temperature():
    body = parse_json(b'{"prompts": ["a"], "n": 1, "params": {"temperature": 1e999}}')  # parses as inf
    with pytest.raises(RequestError, match="params.temperature must be a finite number, got inf"):
        parse_generate(body, LIMITS)


def _update(specs=None, **extra):
    specs = specs if specs is not None else [[n, "bfloat16", list(s)] for n, s in SERVED]
    return {"generation": 1, "update": 0, "specs": specs, "bucket_bytes": 1 << 20, **extra}


def test_an_update_of_the_served_model_parses_with_its_byte_count():
    update, generation, specs, bucket, total = parse_update(_update(), SERVED, "bfloat16", LIMITS)
    assert (update, generation, bucket) == (0, 1, 1 << 20)
    assert [s.name for s in specs] == [n for n, _ in SERVED]
    assert total == (10 * 4 + 4) * 2  # bfloat16: the served model's size, nothing more


@pytest.mark.parametrize("specs,extra,reason", [
    ([["model.embed.weight", "complex128", [10, 4]], ["model.norm.weight", "bfloat16", [4]]], {},
     "must be sent as the served dtype bfloat16, not 'complex128'"),
    (None, {"bucket_bytes": 10**15}, r"bucket_bytes must be an integer in \[1, 1073741824\]"),
    (None, {"bucket_bytes": 0}, "bucket_bytes"),
    ([["../../etc/passwd", "bfloat16", [10, 4]], ["model.norm.weight", "bfloat16", [4]]], {},
     "the served model has no tensor '../../etc/passwd'"),
    ([["model.embed.weight", "bfloat16", [10, 4]], ["model.embed.weight", "bfloat16", [10, 4]]], {}, "listed twice"),
    ([["model.embed.weight", "bfloat16", [10**6, 10**6]], ["model.norm.weight", "bfloat16", [4]]], {},
     r"has shape \[10, 4\] on the server, not \[1000000, 1000000\]"),
    ([["model.embed.weight", "bfloat16", [-10, 4]], ["model.norm.weight", "bfloat16", [4]]], {}, "shape must be"),
    ([["model.embed.weight", "bfloat16", [1] * 9], ["model.norm.weight", "bfloat16", [4]]], {}, "at most 8 sizes"),
    ([["model.norm.weight", "bfloat16", [4]]], {}, "must list the served model's 2 tensors, got 1"),
    ([["model.embed.weight", "bfloat16"], ["model.norm.weight", "bfloat16", [4]]], {}, r"\[name, dtype, shape\]"),
    (None, {"update": -1}, "update must be"),
    (None, {"generation": "1"}, "generation must be"),
    (None, {"port": 1}, r"unknown key\(s\) \['port'\]"),
])
def test_weight_specs_are_checked_against_the_served_model(specs, extra, reason):
    with pytest.raises(RequestError, match=reason):
        parse_update(_update(specs, **extra), SERVED, "bfloat16", LIMITS)


def test_limits_come_from_the_config():
    cfg = load_run_config(None, ["rollout.server_max_n=3", "rollout.server_max_prompts=5",
                                 "rollout.server_max_body_mb=2",
                                 "rollout.vllm_max_model_len=300", "rollout.server_read_timeout_s=4",
                                 "rollout.server_max_connections=7", "rollout.server_batch_window_s=0.1",
                                 "rollout.server_timeout_s=9"])
    limits = ServerLimits.from_config(cfg.rollout)
    assert (limits.max_n, limits.max_prompts, limits.max_body_bytes, limits.max_new_tokens) == (3, 5, 2 << 20, 300)
    assert (limits.read_timeout_s, limits.max_connections, limits.batch_window_s,
            limits.update_timeout_s) == (4, 7, 0.1, 9)


@pytest.mark.parametrize("overrides,reason", [
    (["rollout.server_allow_no_token=true", "rollout.server_host=0.0.0.0"], "needs a loopback rollout.server_host"),
    (["rollout.server_allow_no_token=true", "rollout.server_host=10.0.0.5"], "needs a loopback"),
    (["rollout.server_max_n=0"], r"rollout.server_max_n must be > 0"),
    (["rollout.server_max_body_mb=-1"], r"rollout.server_max_body_mb must be > 0"),
    (["rollout.server_read_timeout_s=0"], r"rollout.server_read_timeout_s must be > 0"),
    (["rollout.server_batch_window_s=5"], r"rollout.server_batch_window_s must lie in \[0, 1\]"),
])
def test_server_config_values_are_checked(overrides, reason):
    with pytest.raises(ConfigError, match=reason):
        load_run_config(None, overrides)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_no_token_is_allowed_on_loopback_only(host):
    assert load_run_config(None, ["rollout.server_allow_no_token=true", f"rollout.server_host={host}"])


def test_the_token_comes_from_the_environment_or_a_file(monkeypatch, tmp_path):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    r = load_run_config(None, []).rollout
    assert server_token(r) is None
    path = tmp_path / "token"
    path.write_text("file-token-0123456789\nignored\n")
    path.chmod(0o600)
    from_file = load_run_config(None, [f"rollout.server_token_file={path}"]).rollout
    assert server_token(from_file) == "file-token-0123456789"
    monkeypatch.setenv(TOKEN_ENV, "env-token-0123456789ab")
    assert server_token(from_file) == "env-token-0123456789ab"  # the environment wins


@pytest.mark.parametrize("content,reason", [("short", "at least 16 visible ASCII"),
                                            ("has a space in it 0123", "without spaces"),
                                            ("", "the file is empty"), (None, "cannot read the token")])
def test_weak_or_missing_tokens_are_refused(monkeypatch, tmp_path, content, reason):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
        path.chmod(0o600)
    r = load_run_config(None, [f"rollout.server_token_file={path}"]).rollout
    with pytest.raises(TokenError, match=reason):
        server_token(r)


def test_authorization_header_is_compared_exactly():
    token = "the-token-0123456789"
    assert authorized(bearer(token)["Authorization"], token)
    assert authorized(f"bearer {token}", token)
    for header in (None, "", f"Bearer {token}x", f"Bearer {token[:-1]}", f"Basic {token}", token, "Bearer",
                   f"Token {token}"):
        assert not authorized(header, token), header
    assert authorized(None, None)  # a server without a token (loopback opt-out) takes anyone


def test_group_store_ops_are_bounded():
    store = dist.HashStore()
    assert serve_store_op(store, {"op": "set", "key": "k", "value": "aGk="}) == {}
    assert serve_store_op(store, {"op": "check", "keys": ["k"]}) == {"found": True}
    assert serve_store_op(store, {"op": "get", "key": "k"}) == {"value": "aGk="}
    assert serve_store_op(store, {"op": "add", "key": "c", "amount": 3}) == {"value": 3}
    with pytest.raises(ValueError, match="no key 'missing'"):  # never blocks the server
        serve_store_op(store, {"op": "get", "key": "missing"})
    with pytest.raises(ValueError, match="unknown store op 'list_keys'"):
        serve_store_op(store, {"op": "list_keys"})
    with pytest.raises(ValueError, match=f"at most {MAX_VALUE_BYTES} bytes"):
        serve_store_op(store, {"op": "set", "key": "big", "value": "A" * (MAX_VALUE_BYTES * 2)})
    with pytest.raises(ValueError, match="not valid base64"):
        serve_store_op(store, {"op": "set", "key": "bad", "value": "***"})
    with pytest.raises(ValueError, match="key must be a string"):
        serve_store_op(store, {"op": "set", "key": "x" * 1000, "value": ""})
    for i in range(MAX_KEYS - store.num_keys()):
        serve_store_op(store, {"op": "set", "key": f"fill{i}", "value": ""})
    with pytest.raises(ValueError, match="the group store is full"):
        serve_store_op(store, {"op": "set", "key": "one-more", "value": ""})
