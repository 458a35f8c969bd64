"""`mathrl vllm-serve` attacked as a stranger would, on loopback, with a stand-in engine.

The real server (routes, token, limits, weight group, uvicorn) runs in this process
(tests/serve_helpers.py); each test drives it over HTTP or raw sockets: no token, a wrong
token, the token in another header, the old weight-replacement attack, replayed and stale
weight updates, an announcement that never sends, and a trainer with the token that still
works end to end. The HTTP-level attacks (slow clients, huge and negative Content-Length,
chunked bodies) are in tests/test_vllm_serve_http.py, the network-namespace check in
tests/test_vllm_serve_netns.py.
"""

from __future__ import annotations

import time

import pytest
import torch

from pipeline.stages import vllm_serve
from pipeline.rollout.server_auth import TOKEN_ENV
from pipeline.rollout.server_limits import ServerLimits
from pipeline.rollout.vllm_client import ServerError, VLLMServerEngine
from pipeline.weights.broadcast import BUCKET_BYTES, Spec
from tests.serve_helpers import TOKEN, StandInEngine, call, running_server, serve_config, toy_model

PROTECTED = [("GET", "/info", None), ("GET", "/weights", None),
             ("POST", "/generate", {"prompts": ["x"], "n": 1}),
             ("POST", "/init_weight_group", {"backend": "gloo", "timeout_s": 5}),
             ("POST", "/group_store", {"generation": 1, "op": "num_keys"}),
             ("POST", "/update_weights", {"generation": 1, "update": 0, "specs": [], "bucket_bytes": 1}),
             ("POST", "/update_weights_done", {"update": 0}),
             ("POST", "/close_weight_group", {})]
WRONG = {"none": {"token": None}, "wrong": {"token": "not-the-token-0123456789"},
         "other header": {"token": None, "headers": {"X-Token": TOKEN, "Token": TOKEN, "Cookie": f"token={TOKEN}"}},
         "basic scheme": {"token": None, "headers": {"Authorization": f"Basic {TOKEN}"}},
         "bare token": {"token": None, "headers": {"Authorization": TOKEN}},
         "prefix of it": {"token": TOKEN[:-1]}}


@pytest.fixture()
def client_env(monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, TOKEN)


def _client(url: str, *overrides):
    port = int(url.rsplit(":", 1)[1])
    return VLLMServerEngine(serve_config(f"rollout.server_port={port}", *overrides), toy_model())


def test_health_says_nothing_and_everything_else_wants_the_token():
    engine = StandInEngine()
    with running_server(serve_config(), engine) as (server, url):
        assert call(url, "GET", "/health", token=None) == (200, {"status": "ok"})
        for kind, how in WRONG.items():
            for method, path, body in PROTECTED:
                path_q = path + (f"?token={TOKEN}" if kind == "other header" else "")
                status, reply = call(url, method, path_q, body, **how)
                assert status == 401, (kind, path, status, reply)
                assert reply == {"error": "missing or wrong token (send Authorization: Bearer <token>; "
                                          "see docs/vllm_serve.md)"}
        assert engine.calls == [] and server.generation == 0 and not server.forming  # nothing happened
        assert call(url, "GET", "/info")[1]["weights_hash"] == server.hash  # the token opens it


def test_a_stranger_cannot_replace_the_weights(client_env):
    """The attack of the issue: a stranger takes names and shapes from GET /weights, opens a weight
    group, announces an update and closes the trainer's group. Every step is refused, the
    trainer's group survives, and the stranger's specs never reach the engine."""
    engine = StandInEngine()
    with running_server(serve_config(), engine) as (server, url):
        trainer = _client(url)
        model = toy_model()
        trainer.sync_weights(model)
        assert len(engine.loaded) == 1
        assert call(url, "GET", "/weights", token=None)[0] == 401
        specs = [Spec.of(n, t).as_json() for n, t in model.state_dict().items()]
        assert call(url, "POST", "/init_weight_group", {"backend": "gloo"}, token=None)[0] == 401
        assert call(url, "POST", "/update_weights", {"generation": trainer.generation, "update": 99, "specs": specs,
                                                     "bucket_bytes": BUCKET_BYTES}, token=None)[0] == 401
        assert call(url, "POST", "/close_weight_group", {}, token=None)[0] == 401
        assert call(url, "POST", "/close_weight_group", {"generation": trainer.generation}, token="x" * 20)[0] == 401
        assert server.group is not None and server.group_generation == trainer.generation
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(-1)
        trainer.sync_weights(model)  # the trainer carries on in the same group
        assert len(engine.loaded) == 2 and server.updates == 2
        assert all(torch.equal(engine.loaded[-1][k], v) for k, v in model.state_dict().items())
        trainer.close()


def test_replayed_stale_and_overlapping_updates_are_refused(client_env):
    engine = StandInEngine()
    with running_server(serve_config(), engine) as (server, url):
        trainer = _client(url)
        model = toy_model()
        trainer.sync_weights(model)  # update 0 of group 1
        specs = [Spec.of(n, t).as_json() for n, t in model.state_dict().items()]
        announce = {"generation": trainer.generation, "update": 0, "specs": specs, "bucket_bytes": BUCKET_BYTES}
        status, reply = call(url, "POST", "/update_weights", announce)
        assert status == 409 and "update 0 is not newer than update 0 of this group (replayed?)" in reply["error"]
        status, reply = call(url, "POST", "/update_weights", {**announce, "generation": trainer.generation + 5})
        assert status == 409 and "is gone" in reply["error"]
        assert call(url, "POST", "/update_weights_done", {"update": 7})[0] == 400
        status, reply = call(url, "POST", "/close_weight_group", {})  # no generation: nothing is dropped
        assert status == 400 and "generation must be an integer" in reply["error"]
        assert call(url, "POST", "/close_weight_group", {"generation": 99})[0] == 409
        assert server.group is not None
        accepted = {"ok": True, "bytes": sum(t.numel() * 4 for t in model.state_dict().values())}
        assert call(url, "POST", "/update_weights", {**announce, "update": 1})[1] == accepted
        receive = server.pending[2]
        # the same announcement again (a retry whose first reply was lost) is answered the same and
        # starts nothing; the same update id with other specs or bucket is a replay
        assert call(url, "POST", "/update_weights", {**announce, "update": 1}) == (200, accepted)
        assert server.pending[2] is receive
        status, reply = call(url, "POST", "/update_weights", {**announce, "update": 1, "bucket_bytes": 1024})
        assert status == 409 and "update 1 is not newer than update 1" in reply["error"]
        status, reply = call(url, "POST", "/update_weights", {**announce, "update": 1, "specs": specs[::-1]})
        assert status == 409 and "update 1 is not newer than update 1" in reply["error"]
        status, reply = call(url, "POST", "/update_weights", {**announce, "update": 2})
        assert status == 409 and "update 1 is still in progress" in reply["error"]
        trainer.close()


def test_a_lost_reply_to_the_announcement_is_retried_and_the_update_lands(client_env, monkeypatch):
    """Strangers crowding the port can drop the trainer's connection after the server accepted
    /update_weights: the client retries the same announcement, the server answers it as the first
    time, and the weights arrive (this was a 409 "replayed?" that stopped training)."""
    import pipeline.rollout.vllm_client as client_module

    engine = StandInEngine()
    with running_server(serve_config(), engine) as (server, url):
        trainer = _client(url)
        model = toy_model()
        trainer.sync_weights(model)
        real_call_once, lost = trainer._call_once, []

        def drop_first_announcement_reply(method, path, body, timeout, first):
            reply = real_call_once(method, path, body, timeout, first)
            if path == "/update_weights" and not lost:
                lost.append(reply)  # the server has accepted it; the reply never reaches the trainer
                raise client_module._Retry(client_module.ServerLost("connection reset")) from ConnectionResetError()
            return reply

        monkeypatch.setattr(trainer, "_call_once", drop_first_announcement_reply)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
        trainer.sync_weights(model)
        assert lost and server.updates == 2 and len(engine.loaded) == 2
        assert all(torch.equal(engine.loaded[-1][k], v) for k, v in model.state_dict().items())
        trainer.close()


def test_an_announced_update_that_never_comes_expires_without_stalling_generation(client_env):
    """A trainer (with the token) announces an update and sends nothing: /generate is answered
    meanwhile, and at the server's rollout.server_timeout_s (2 s here; the client asked 20 s) the
    announcement expires, the group is dropped and the previous weights stay."""
    engine = StandInEngine()
    with running_server(serve_config("rollout.server_timeout_s=2"), engine) as (server, url):
        trainer = _client(url, "rollout.server_timeout_s=20")
        model = toy_model()
        trainer.sync_weights(model)
        specs = [Spec.of(n, t).as_json() for n, t in model.state_dict().items()]
        start = time.monotonic()
        assert call(url, "POST", "/update_weights", {"generation": trainer.generation, "update": 1, "specs": specs,
                                                     "bucket_bytes": BUCKET_BYTES})[0] == 200
        status, reply = call(url, "POST", "/generate", {"prompts": ["q"], "n": 1}, timeout=5)
        assert status == 200 and time.monotonic() - start < 1.5  # not stalled behind the update
        status, reply = call(url, "POST", "/update_weights_done", {"update": 1}, timeout=15)
        assert status == 500 and "the announced update expired" in reply["error"], reply
        assert 1.5 < time.monotonic() - start < 10
        assert server.group is None and len(engine.loaded) == 1
        trainer._drop_group()


def test_a_new_trainer_waits_for_a_hung_trainers_update_to_expire(client_env):
    """Trainer A hangs mid-update (announced, nothing sent); trainer B starts and syncs: B's update
    waits for A's to expire (2 s) instead of failing, then B's weights are loaded."""
    engine = StandInEngine()
    with running_server(serve_config("rollout.server_timeout_s=2"), engine) as (server, url):
        hung, model = _client(url), toy_model()
        hung.sync_weights(model)
        specs = [Spec.of(n, t).as_json() for n, t in model.state_dict().items()]
        assert call(url, "POST", "/update_weights", {"generation": hung.generation, "update": 1, "specs": specs,
                                                     "bucket_bytes": BUCKET_BYTES})[0] == 200
        start = time.monotonic()
        fresh = _client(url)
        with torch.no_grad():
            model[0].weight.fill_(0.5)
        fresh.sync_weights(model)
        assert 1 < time.monotonic() - start < 15
        assert server.group_generation == fresh.generation == hung.generation + 1 and len(engine.loaded) == 2
        assert torch.equal(engine.loaded[-1]["0.weight"], model[0].weight)
        fresh.close()
        hung._drop_group()


def test_a_group_nobody_joins_expires_at_the_servers_timeout():
    with running_server(serve_config("rollout.server_timeout_s=2")) as (server, url):
        generation = call(url, "POST", "/init_weight_group", {"backend": "gloo", "timeout_s": 1e9})[1]["generation"]
        assert call(url, "POST", "/group_store", {"generation": generation, "op": "num_keys"})[0] == 200
        call(url, "POST", "/init_weight_group", {"backend": "gloo", "timeout_s": 1e9})
        status, reply = call(url, "POST", "/init_weight_group", {"backend": "gloo"})
        assert status == 409 and "already waiting" in reply["error"]  # at most two forming at once
        deadline = time.monotonic() + 20
        while server.forming:
            assert time.monotonic() < deadline, "the forming groups did not expire"
            time.sleep(0.2)
        status, reply = call(url, "POST", "/group_store", {"generation": generation, "op": "num_keys"})
        assert status == 409 and "is not forming" in reply["error"]
        for body in ({"backend": "mpi"}, {"backend": "gloo", "timeout_s": -1}, {"backend": "nccl"}, {"port": 1}):
            assert call(url, "POST", "/init_weight_group", body)[0] == 400, body


def test_a_trainer_without_the_token_is_told_how_to_pass_it(monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with running_server(serve_config()) as (_, url):
        with pytest.raises(ServerError, match=r"refused GET /info: missing or wrong token.*This trainer sent no token: "
                                              rf"set {TOKEN_ENV}"):
            _client(url)
        monkeypatch.setenv(TOKEN_ENV, "a-different-token-0123")
        with pytest.raises(ServerError, match="The token differs"):
            _client(url)


def test_a_server_started_without_the_loopback_opt_out_asks_for_a_token(monkeypatch, capsys):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert vllm_serve.main(serve_config()) == 2  # before any engine is loaded
    err = capsys.readouterr().err
    assert f"no token: set {TOKEN_ENV}" in err and "rollout.server_allow_no_token=true" in err
    monkeypatch.setenv(TOKEN_ENV, "short")
    assert vllm_serve.main(serve_config()) == 2
    assert "at least 16" in capsys.readouterr().err


def test_the_loopback_opt_out_serves_without_a_token(monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    engine = StandInEngine()
    with running_server(serve_config("rollout.server_allow_no_token=true"), engine, token=None) as (_, url):
        trainer = _client(url)
        trainer.sync_weights(toy_model())
        assert len(engine.loaded) == 1 and trainer.generate(["p"], 2, _params())[0][1].completion == "p#1 seed=None"
        trainer.close()


def test_weight_updates_that_do_not_fit_the_served_model_are_refused_over_http():
    with running_server(serve_config()) as (_, url):
        base = {"generation": 1, "update": 0, "bucket_bytes": BUCKET_BYTES}
        model = toy_model()
        good = [Spec.of(n, t).as_json() for n, t in model.state_dict().items()]
        for specs, bucket, reason in [
            ([[n, "complex128", s] for n, _, s in good], BUCKET_BYTES, "served dtype float32, not 'complex128'"),
            (good, 10**15, "bucket_bytes must be an integer in"),
            ([["../" + good[0][0], *good[0][1:]], *good[1:]], BUCKET_BYTES, "has no tensor '../0.weight'"),
            ([[good[0][0], "float32", [5, 7]], *good[1:]], BUCKET_BYTES, "has shape [5, 6] on the server"),
        ]:
            status, reply = call(url, "POST", "/update_weights", {**base, "specs": specs, "bucket_bytes": bucket})
            assert status == 400 and reason in reply["error"], reply


def _params():
    from pipeline.rollout.base import SamplingParams
    return SamplingParams(max_new_tokens=8)


def test_limits_are_enforced_over_http_and_never_reach_the_engine():
    engine = StandInEngine()
    limits = ServerLimits(max_n=4, max_prompts=8, max_new_tokens=64)
    with running_server(serve_config(), engine, limits=limits) as (_, url):
        for body, reason in [({"prompts": ["x"], "n": int(1e9)}, "n (rollout.server_max_n)"),
                             ({"prompts": ["x"], "n": 1, "params": {"max_new_tokens": int(1e9)}},
                              "params.max_new_tokens"),
                             ({"prompts": ["x"] * 1000, "n": 1}, "rollout.server_max_prompts"),
                             ({"prompts": ["x"], "n": 1, "params": {"temperature": -5}},
                              "params.temperature must be >= 0"),
                             ({"prompts": ["x"], "n": 1, "params": {"top_p": 7}}, "params.top_p must lie in (0, 1]")]:
            status, reply = call(url, "POST", "/generate", body)
            assert status == 400 and reason in reply["error"], (body, reply)
        assert engine.calls == []
        assert call(url, "POST", "/generate",
                    {"prompts": ["x"] * 8, "n": 4, "params": {"max_new_tokens": 64}})[0] == 200


def test_the_client_splits_prompt_lists_at_the_servers_limit(client_env):
    engine = StandInEngine()
    with running_server(serve_config(), engine, limits=ServerLimits(max_prompts=4, batch_window_s=0)) as (_, url):
        trainer = _client(url)
        from pipeline.rollout.base import SamplingParams
        groups = trainer.generate([f"p{i}" for i in range(10)], 3, SamplingParams(seed=100))
        assert [g[0].prompt for g in groups] == [f"p{i}" for i in range(10)]
        assert [len(c[0][0]) for c in engine.calls] == [4, 4, 2]
        assert [c[0][2].seed for c in engine.calls] == [100, 100 + 4 * 3, 100 + 8 * 3]  # prompt i keeps seed + i * n
