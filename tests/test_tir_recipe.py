"""The GPU recipe of tool-integrated reasoning (configs/gpu_qwen_math_tir.yaml, issue 28 item 7), checked
on the CPU: it loads with the python tool on the HF engine and Qwen's TIR prompt, `mathrl plan` accepts
it and finds that it fits one 80 GB card, and the same recipe on a vLLM engine is refused."""

from __future__ import annotations

import pytest

from pipeline.config import ConfigError, load_run_config
from pipeline.plan.shapes import load_config, shape_from_config
from pipeline.stages.plan import main as plan_main

RECIPE = "configs/gpu_qwen_math_tir.yaml"


def test_the_recipe_runs_the_tool_on_the_hf_engine_with_qwens_tir_prompt():
    cfg = load_run_config(RECIPE, [])
    assert cfg.model.name_or_path == "Qwen/Qwen2.5-Math-1.5B-Instruct"
    assert cfg.rollout.engine == "hf" and cfg.rollout.tools == ["python"] and cfg.rollout.max_tool_calls == 4
    assert cfg.prompt.template == "qwen_math_tir" and cfg.reward.style == "math"
    assert cfg.train.task == "math" and cfg.eval.dataset == "math500"


def test_plan_accepts_the_recipe_and_it_fits_80_gb(capsys):
    code = plan_main(load_run_config(RECIPE, []), gpu_mem=80.0)
    out = capsys.readouterr().out
    assert code == 0, out
    for name in ["policy weights", "AdamW moments", "HF generate KV cache", "layer activations", "phase peaks"]:
        assert name in out
    assert "vLLM engine" not in out and "does NOT fit" not in out


def test_the_instruct_model_has_the_base_models_shape():
    instruct, source = load_config("Qwen/Qwen2.5-Math-1.5B-Instruct")
    base, _ = load_config("Qwen/Qwen2.5-Math-1.5B")
    assert shape_from_config(instruct) == shape_from_config(base) and source.endswith("Qwen2.5-Math-1.5B.json")


def test_the_recipe_on_a_vllm_engine_needs_room_for_prompt_and_completion():
    with pytest.raises(ConfigError, match="vllm_max_model_len"):
        load_run_config(RECIPE, ["rollout.engine=vllm", "rollout.decode=generate"])
    cfg = load_run_config(RECIPE, ["rollout.engine=vllm", "rollout.decode=generate", "rollout.vllm_max_model_len=4096"])
    assert cfg.rollout.tools == ["python"]
    with pytest.raises(ConfigError, match="rollout.tools on vllm_server: rollout.vllm_max_model_len"):
        load_run_config(RECIPE, ["rollout.engine=vllm_server", "rollout.decode=generate"])
    server = ["rollout.engine=vllm_server", "rollout.decode=generate", "rollout.vllm_max_model_len=4096"]
    assert load_run_config(RECIPE, server).rollout.tools == ["python"]  # the server runs the tool
