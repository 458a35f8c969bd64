"""Test-only helpers shared by several test files."""


def digit_fraction(completion: str, gold: str, style: str = "auto") -> float:
    """A reward with variance even on an untrained model: the share of digits in the text.
    Used where a test needs a learning signal without first teaching the model the task."""
    return sum(c.isdigit() for c in completion) / max(1, len(completion))


def char_count(completion: str, gold: str, style: str = "auto") -> float:
    """The completion's length in characters / 100: two sampled completions of an untrained model
    almost never tie, so a small weight of it gives every group a learning signal even when no
    sample happens to hold a digit (tests that assert a non-zero gradient on every step)."""
    return len(completion) / 100


class CharTokenizer:
    """One token per character: decode is exact, so a step's character end is its token end."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids)


def sft_cfg(tiny_setup, tmp_path, *extra):
    """A run config for a short SFT of the session's tiny model into ``tmp_path/sft`` (``extra``: more overrides)."""
    from pipeline.config import load_run_config

    overrides, root = tiny_setup
    return load_run_config(None, [*overrides, f"sft.init={root}/tiny", f"sft.output={tmp_path}/sft", "device=cpu",
                                  "sft.batch_size=8", "sft.lr=3e-3", "sft.warmup_steps=5", "eval.max_new_tokens=16",
                                  *extra])


def digit_fraction_odd_gold(completion: str, gold: str, style: str = "auto") -> float:
    """``digit_fraction`` on problems whose gold answer is odd, 0 on the others: a batch with both
    groups that teach and groups whose rewards are all equal (advantage 0), on an untrained model."""
    return digit_fraction(completion, gold) if gold.strip().lstrip("-").isdigit() and int(gold) % 2 else 0.0


def load_benchmark_script(name: str):
    """``benchmarks/<name>.py`` imported as a module for its functions, with the environment it sets
    on import (HF_HUB_OFFLINE, TQDM_DISABLE, ...) given back afterwards, so later tests see the usual one."""
    import importlib.util
    import os
    from pathlib import Path

    saved = dict(os.environ)
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return module


def process_running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie has exited: its parent just has not reaped it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
