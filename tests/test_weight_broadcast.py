"""The trainer -> vLLM server weight channel (pipeline/weights/broadcast.py) on gloo, and the
server-mode client's fail-fast connect. Two real processes; no vllm needed. The two members
meet through a ``FileStore`` here (the server and its client use the server's in-memory store
over HTTP, tests/test_vllm_serve_security.py); gloo listens on loopback."""

import multiprocessing as mp
import os
import time

import pytest
import torch
import torch.distributed as dist

from pipeline.config import load_run_config
from pipeline.parallel.distributed import PeerLost
from pipeline.weights.broadcast import BroadcastError, Spec, WeightGroup, plan_buckets
from tests.dist_runs import free_port

BUCKET = 128  # bytes: small, so the tensors below span several buckets and one exceeds a bucket
SECRET = b"a-shared-token-of-the-server"


def mixed_tensors() -> list[tuple[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(7)
    f32 = torch.randn(37, 5, generator=g)
    f32[0, 0], f32[0, 1], f32[0, 2] = float("nan"), -0.0, float("inf")
    return [("a.f32", f32),  # 740 bytes: larger than a bucket
            ("b.bf16", torch.randn(3, 7, generator=g).to(torch.bfloat16)),
            ("c.f16", torch.randn(11, generator=g).to(torch.float16)),
            ("d.i64", torch.randint(-2**40, 2**40, (4, 3), generator=g)),
            ("e.bool", torch.rand(9, generator=g) > 0.5),
            ("f.scalar", torch.tensor(3.25, dtype=torch.float64)),
            ("g.empty", torch.empty(0, 4)),
            ("h.i8", torch.randint(-128, 127, (13,), generator=g, dtype=torch.int8))]


def _sender(path: str, mode: str, secret: bytes = SECRET) -> None:
    store = dist.FileStore(path, 2)
    try:
        group = WeightGroup.join(store, 0, "gloo", 30.0, generation=3, secret=secret, host="127.0.0.1")
    except BroadcastError:
        os._exit(3)  # refused by the receiver's token check
    if mode == "send":  # streamed, as the client sends: specs announced, tensors made as buckets fill
        specs = [Spec.of(n, t) for n, t in mixed_tensors()]
        group.send((pair for pair in mixed_tensors()), BUCKET, specs=specs)
        group.barrier()
    elif mode == "die":
        os._exit(0)  # sockets close: the receiver must notice at once
    elif mode == "hang":
        time.sleep(60)


def _start(mode: str, timeout_s: float, tmp_path, secret: bytes = SECRET):
    """(receiving group, sender process). Joining may take a while on a busy machine (the sender
    starts a fresh interpreter); ``timeout_s`` applies to the transfers after it."""
    path = str(tmp_path / "store")
    store = dist.FileStore(path, 2)
    proc = mp.get_context("spawn").Process(target=_sender, args=(path, mode, secret), daemon=True)
    proc.start()
    group = WeightGroup.join(store, 1, "gloo", 60, generation=3, secret=SECRET, host="127.0.0.1")
    group.set_timeout(timeout_s)
    return group, proc


def test_plan_buckets_keeps_order_and_limits():
    specs = [Spec.of(n, t) for n, t in mixed_tensors()]
    buckets = plan_buckets(specs, BUCKET)
    assert [i for b in buckets for i in b] == list(range(len(specs)))
    assert len(buckets) > 2 and buckets[0] == [0]  # the oversized tensor travels alone


class Recorder(WeightGroup):
    """A sender without a peer: keeps each bucket it would broadcast and how many tensors the
    stream had produced by then."""

    def __init__(self, made: list):
        super().__init__(None, None, 0, torch.device("cpu"), 1.0)
        self.buffers, self.made, self.made_at_send = [], made, []

    def _broadcast(self, buf, what):
        self.buffers.append(buf.clone())
        self.made_at_send.append(len(self.made))


def test_streamed_send_pulls_one_bucket_at_a_time_and_checks_the_specs():
    made = []

    def stream(items):
        for name, t in items:
            made.append(name)
            yield name, t

    items = mixed_tensors()
    specs = [Spec.of(n, t) for n, t in items]
    listed, streamed = Recorder([]), Recorder(made)
    listed.send(items, BUCKET)
    streamed.send(stream(items), BUCKET, specs=specs)
    assert [torch.equal(a, b) for a, b in zip(listed.buffers, streamed.buffers)] == [True] * len(listed.buffers)
    ends = [b[-1] + 1 for b in plan_buckets(specs, BUCKET)]
    assert streamed.made_at_send == ends  # bucket i went out before bucket i+1's tensors were made
    with pytest.raises(ValueError, match="out of step"):
        Recorder([]).send(stream(items[1:]), BUCKET, specs=specs)  # a tensor the specs did not announce
    with pytest.raises(ValueError, match="end of the stream"):
        Recorder([]).send(stream(items[:3]), BUCKET, specs=specs)


def test_mixed_dtypes_arrive_bit_exact(tmp_path):
    group, proc = _start("send", 30.0, tmp_path)
    try:
        expected = mixed_tensors()
        got = group.receive([Spec.of(n, t) for n, t in expected], BUCKET)
        group.barrier()
    finally:
        proc.join(30)
        group.close()
    assert proc.exitcode == 0
    assert [n for n, _ in got] == [n for n, _ in expected]
    for (_, want), (name, t) in zip(expected, got):
        assert t.dtype == want.dtype and t.shape == want.shape, name
        assert torch.equal(t.reshape(-1).view(torch.uint8), want.reshape(-1).view(torch.uint8)), name


@pytest.mark.parametrize("mode,timeout_s,limit_s", [("die", 30.0, 10.0), ("hang", 3.0, 15.0)])
def test_receiver_errors_when_peer_dies_or_hangs(mode, timeout_s, limit_s, tmp_path):
    """A dead sender is noticed at once (well under the 30 s timeout); a hung one after the timeout."""
    group, proc = _start(mode, timeout_s, tmp_path)
    start = time.monotonic()
    try:
        with pytest.raises(BroadcastError, match="receiving weight bucket 0"):
            group.receive([Spec.of(n, t) for n, t in mixed_tensors()], BUCKET)
    finally:
        group.close()
        proc.kill()
        proc.join(10)
    assert time.monotonic() - start < limit_s


def test_receive_deadline_ends_a_transfer_that_never_comes(tmp_path):
    """The server's announcement expiry: a sender that joined but sends nothing is given up at
    the deadline, even though the per-bucket timeout (30 s) is longer."""
    group, proc = _start("hang", 30.0, tmp_path)
    start = time.monotonic()
    try:
        with pytest.raises(BroadcastError, match="receiving weight bucket 0"):
            group.receive([Spec.of(n, t) for n, t in mixed_tensors()], BUCKET, deadline=time.monotonic() + 2)
    finally:
        group.close()
        proc.kill()
        proc.join(10)
    assert time.monotonic() - start < 10


def test_join_with_the_wrong_token_is_refused_before_any_transfer(tmp_path):
    """Whoever reaches gloo's port must still prove the token: the receiver refuses, the sender is told."""
    start = time.monotonic()
    with pytest.raises(BroadcastError, match="did not prove the server's token"):
        _start("send", 30.0, tmp_path, secret=b"someone-else's-guess")
    assert time.monotonic() - start < 60


def test_join_without_peer_times_out(tmp_path):
    store = dist.FileStore(str(tmp_path / "store"), 2)
    start = time.monotonic()
    with pytest.raises(BroadcastError, match="could not form the weight group"):
        WeightGroup.join(store, 1, "gloo", 2.0, host="127.0.0.1")
    assert time.monotonic() - start < 15


def test_client_fails_fast_without_server(tiny_setup):
    from pipeline.models import load_policy
    from pipeline.rollout.vllm_client import VLLMServerEngine

    port = free_port()  # a port nobody listens on
    overrides, _ = tiny_setup
    cfg = load_run_config(None, [*overrides, "rollout.engine=vllm_server", f"rollout.server_port={port}"])
    model, _ = load_policy(cfg.model.name_or_path)
    start = time.monotonic()
    with pytest.raises(PeerLost, match=rf"no vLLM server at http://127.0.0.1:{port} .*mathrl vllm-serve --config"):
        VLLMServerEngine(cfg, model)
    assert time.monotonic() - start < 5
