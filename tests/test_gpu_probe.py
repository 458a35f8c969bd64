"""benchmarks/gpu_probe.py at tiny shapes on the CPU: a case runs the trainer's pieces end to end
and reports what the device run needs (timings, generate tokens/s, plan figures per phase, finite
left-padded log-probs, SDPA backends), and the verdict fails what it must."""

from __future__ import annotations

import pytest

from tests.helpers import load_benchmark_script


@pytest.fixture(scope="module")
def probe():
    return load_benchmark_script("gpu_probe")


def test_a_small_case_measures_what_the_device_run_reports(probe):
    result = probe.run_case("full-1.5b-3000", "cpu", "small", 80 * probe.GIB)
    assert probe.problems_of(result) == []
    assert result["micro_batch"] == 2 and result["completion_tokens"] == 24 and not result["reference"]
    assert result["logprobs_finite_left_padded"] and result["plain_mask_logprobs_finite"]
    assert result["generate"]["new_tokens"] > 0 and result["generate"]["tokens_per_s"] > 0
    assert result["seconds"]["update_one_micro_batch"] > 0
    mem = result["memory_gib"]
    assert set(mem) == {"rollout (hf, this call)", "update", "step"}  # no reference: no log-probs pass
    assert all(v["measured"] is None and v["plan"] > 0 for v in mem.values())  # the CPU has no allocator peak
    assert mem["update"]["plan"] < 0.1  # planned for the small shape it ran with the HF engine: no vLLM share
    assert result["sdpa_backends"]["math/ours"] == "finite"
    line = probe.summary({**result, "problems": []})
    assert line.startswith("full-1.5b-3000 ok") and "memory n/a on cpu" in line


def test_the_verdict_fails_non_finite_results_and_nan_with_our_mask(probe):
    good = {"logprobs_finite_left_padded": True, "loss_finite": True, "grad_norm_finite": True,
            "entropy_finite": True, "generate": {"new_tokens": 8},
            "sdpa_backends": {"math/plain": "NaN/inf in real rows", "math/ours": "finite",
                              "cudnn_attention/ours": "not supported: no kernel"}}
    assert probe.problems_of(good) == []  # the plain mask's NaN is a finding, not a failure
    for key in ("logprobs_finite_left_padded", "loss_finite", "grad_norm_finite", "entropy_finite"):
        assert probe.problems_of({**good, key: False}) == [key]
    nan = {**good, "sdpa_backends": {"efficient_attention/ours": "NaN/inf in pad rows only"}}
    assert probe.problems_of(nan) == ["sdpa efficient_attention/ours: NaN/inf in pad rows only"]
    assert probe.problems_of({**good, "generate": {"new_tokens": 0}}) == ["generate made no tokens"]
