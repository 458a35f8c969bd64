"""SFT warm start: consistent one-step corruption, completion-only labels, a short run lowers the loss."""

from __future__ import annotations

import json
import random
import re

import pytest

from pipeline import sft
from pipeline.stages import sft as sft_stage
from pipeline.config import DataConfig, load_run_config
from pipeline.data.problems import load_problems
from pipeline.models import load_policy
from pipeline.data.synth import generate

LINE = re.compile(r"<<(\d+)([-+*/])(\d+)=(\d+)>>(\d+)")
CALC = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a // b}


def steps(solution: str) -> list[tuple[int, str, int, int]]:
    return [(int(a), op, int(b), int(c)) for a, op, b, c, _ in LINE.findall(solution)]


def test_corruption_makes_exactly_one_step_wrong_and_carries_it_forward():
    train, _ = generate(DataConfig(synth_train_size=500, synth_test_size=10, synth_ops=["+", "-", "*", "/"],
                                   synth_max_steps=4))
    rng = random.Random(0)
    corrupted = 0
    for r in train:
        bad = sft.corrupt_solution(r["solution"], rng)
        if bad is None:
            continue
        corrupted += 1
        old, new = steps(r["solution"]), steps(bad)
        wrong = [k for k, (a, op, b, c) in enumerate(new) if CALC[op](a, b) != c]
        assert len(wrong) == 1, bad
        for k in range(1, len(new)):
            assert new[k][0] == new[k - 1][3] or old[k][0] != old[k - 1][3]  # chain kept
        assert [(op, b) for _, op, b, _ in new] == [(op, b) for _, op, b, _ in old]
        assert sft.extract_answer(bad) == str(new[-1][3]) != r["answer"]
    assert corrupted > 450


def test_slip_corruption_updates_distractor_lines():
    train, _ = generate(DataConfig(synth_train_size=300, synth_test_size=10, synth_distractors=2))
    rng = random.Random(0)
    checked = 0
    for r in train:
        bad = sft.corrupt_solution(r["solution"], rng)
        if bad is None or "same:" not in bad:
            continue
        value = None
        for line in bad.split("\n")[:-1]:  # every same line repeats the (possibly wrong) value before it
            m = LINE.search(line)
            if m:
                value = int(m.group(4))
            elif value is not None:
                assert line == f"same: {value}", bad
                checked += 1
    assert checked > 50


@pytest.mark.parametrize("frac", [0.0, 0.5, 1.0])
def test_carry_bug_only_touches_carries_and_borrows(frac):
    train, _ = generate(DataConfig(synth_train_size=600, synth_test_size=10, synth_distractors=1))
    out, n = sft.corrupt_records(train, frac, seed=3, mode="carry")
    sites = wrong = 0
    for r, o in zip(train, out):
        old, new = steps(r["solution"]), steps(o["solution"])
        assert [(op, b) for _, op, b, _ in new] == [(op, b) for _, op, b, _ in old]
        for k, (a, op, b, c) in enumerate(new):
            assert k == 0 or a == new[k - 1][3] or old[k][0] != old[k - 1][3]  # the chain continues
            site = sft.has_bug_site(op, a, b)
            sites += site
            if c != CALC[op](a, b):  # a wrong step is a bug site done the buggy way, nothing else
                assert site and c == CALC[op](a, b) + (-10 if op == "+" else 10), o["solution"]
                wrong += 1
        assert sft.extract_answer(o["solution"]) == str(new[-1][3])
        assert o.get("corrupted", False) == (o["solution"] != r["solution"])
    assert sites > 200 and wrong / sites == pytest.approx(frac, abs=0.08)
    assert n == sum(o.get("corrupted", False) for o in out)


def test_corrupt_records_fraction_and_untouched_originals():
    train, _ = generate(DataConfig(synth_train_size=2000, synth_test_size=10))
    out, n = sft.corrupt_records(train, 0.3, seed=1)
    assert 500 < n < 700 and sum(r.get("corrupted", False) for r in out) == n
    assert all("corrupted" not in r for r in train)
    assert sft.corrupt_records(train, 0.0, seed=1) == (train, 0)


def test_extract_answer_takes_the_last_marker():
    assert sft.extract_answer("a\n#### 12\n#### 1,234") == "1234"
    assert sft.extract_answer("#### -3") == "-3"
    assert sft.extract_answer("no answer 12") is None


def test_collate_puts_labels_only_on_the_completion():
    ids, mask, labels = sft.collate([([5, 6, 7], [8, 9]), ([5], [8, 9, 10])], pad_id=0)
    assert ids.tolist() == [[5, 6, 7, 8, 9], [5, 8, 9, 10, 0]]
    assert mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    assert labels.tolist() == [[-100, -100, -100, 8, 9], [-100, 8, 9, 10, -100]]


def test_lr_warms_up_then_decays_to_a_tenth():
    lrs = [sft.lr_at(s, 100, 10, 1.0) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:])) and lrs[-1] == pytest.approx(0.1, abs=0.01)


def sft_cfg(tiny_setup, tmp_path, *extra):
    overrides, root = tiny_setup
    return load_run_config(None, [*overrides, f"sft.init={root}/tiny", f"sft.output={tmp_path}/sft", "device=cpu",
                                  "sft.batch_size=8", "sft.lr=3e-3", "sft.warmup_steps=5", *extra])


def test_short_sft_lowers_the_loss(tiny_setup, tmp_path):
    cfg = sft_cfg(tiny_setup, tmp_path, "sft.steps=40")
    model, tok = load_policy(cfg.sft.init)
    records = load_problems(cfg.data.prepared_dir, "gsm-synth", "train")
    losses = sft.train(model, tok, sft.encode(records, tok, cfg), cfg, progress=False)
    assert len(losses) == 40
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5


def test_main_saves_a_loadable_model_and_reports_accuracy(tiny_setup, tmp_path, capsys):
    cfg = sft_cfg(tiny_setup, tmp_path, "sft.steps=3", "sft.eval_limit=4")
    sft.main(cfg)
    model, tok = load_policy(cfg.sft.output)
    assert tok.eos_token == "<|im_end|>"
    report = json.loads((tmp_path / "sft" / "sft_report.json").read_text())
    assert report["n"] == 4 and 0.0 <= report["accuracy"] <= 1.0 and report["steps"] == 3
    assert "greedy accuracy on 4 test problems" in capsys.readouterr().out


def test_main_skips_when_nothing_changed(tiny_setup, tmp_path, capsys):
    cfg = sft_cfg(tiny_setup, tmp_path, "sft.steps=2", "sft.eval_limit=0")
    sft.main(cfg)
    weights = tmp_path / "sft" / "model.safetensors"
    before = weights.stat().st_mtime_ns
    capsys.readouterr()
    sft.main(cfg)
    assert "up to date" in capsys.readouterr().out and weights.stat().st_mtime_ns == before
    sft.main(sft_cfg(tiny_setup, tmp_path, "sft.steps=3", "sft.eval_limit=0"))
    assert "up to date" not in capsys.readouterr().out and weights.stat().st_mtime_ns != before


def test_main_builds_the_tiny_base_when_init_is_the_missing_tiny_dir(tiny_setup, tmp_path):
    fresh = tmp_path / "fresh-base"
    cfg = sft_cfg(tiny_setup, tmp_path, "sft.steps=2", "sft.eval_limit=0", f"model.tiny_dir={fresh}",
                  f"sft.init={fresh}")
    sft_stage.main(cfg)
    assert (fresh / "tiny_build.json").is_file()
    assert load_policy(cfg.sft.output)[0].config.model_type == "qwen2"
