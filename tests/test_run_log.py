"""curves.png: smoothed noisy curves, KL only when computed, every eval accuracy with its step-0 point;
metrics.jsonl after a restart: no repeated rows."""

from __future__ import annotations

import json

from pipeline.grpo.run_log import RunLog, eval_keys, panels_for, plot_curves, read_metrics, smooth


def test_smooth_is_a_trailing_mean():
    assert smooth([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]
    assert smooth([2.0], 5) == [2.0]


def _rows(kl: bool) -> list[dict]:
    rows = [{"step": 0, "eval/accuracy": 0.3, "eval/sampled_accuracy": 0.3, "eval/greedy_accuracy": 0.6,
             "eval/test_longer/greedy_accuracy": 0.1}]
    for step in range(1, 21):
        row = {"step": step, "reward/mean": step / 20, "entropy": 1.0 - step / 40, "clip_frac_low": 0.0,
               "clip_frac_high": 0.0, "grad_norm": 0.5, "completion_len/mean": 30.0, "loss": 1e-9}
        if kl:
            row["kl"] = 0.01 * step
        if step % 10 == 0:
            row.update({"eval/accuracy": 0.5, "eval/sampled_accuracy": 0.5, "eval/greedy_accuracy": 0.7,
                        "eval/test_longer/greedy_accuracy": 0.2})
        rows.append(row)
    return rows


def test_panels_follow_what_was_logged(tmp_path):
    titles = [p[0] for p in panels_for(_rows(kl=False))]
    assert titles[:4] == ["reward (train samples)", "policy entropy (nats / token)", "clipped tokens",
                          "gradient norm (before clipping)"]
    assert not any("KL" in t for t in titles) and not any("loss" in t for t in titles)
    assert any("KL" in p[0] for p in panels_for(_rows(kl=True)))
    keys = eval_keys(_rows(kl=False))
    assert keys == ["eval/greedy_accuracy", "eval/sampled_accuracy", "eval/test_longer/greedy_accuracy"]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows(kl=False)))
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows if "eval/greedy_accuracy" in r] == [0, 10, 20]  # step 0 is a point
    out = plot_curves(tmp_path)
    assert out == tmp_path / "curves.png" and out.stat().st_size > 10_000


def test_a_fresh_start_empties_the_log_and_a_resume_keeps_rows_up_to_its_step(tmp_path):
    """A run killed before its first checkpoint had logged its step-0 eval; started again, it logs
    that eval again, so the old rows must go (they were kept once, giving two step-0 rows)."""
    rows = _rows(kl=False)
    for resume_step, expected in ((None, []), (10, list(range(11)))):
        (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (tmp_path / "samples.jsonl").write_text(json.dumps({"step": 3, "completion": "x"}) + "\n")
        log = RunLog(tmp_path, resume_step)
        assert [r["step"] for r in read_metrics(tmp_path)] == expected
        assert bool((tmp_path / "samples.jsonl").read_text()) == (resume_step is not None)
        log.log(expected[-1] + 1 if expected else 0, {"reward/mean": 0.5})
        steps = [r["step"] for r in read_metrics(tmp_path)]
        assert len(steps) == len(set(steps))


def test_continuing_another_runs_checkpoint_starts_with_its_history(tmp_path):
    """train.resume=<other run>/checkpoints/step_10: this run's files begin with the other run's
    rows up to step 10 (not after), replacing what an earlier attempt of this run had written."""
    other, mine = tmp_path / "other", tmp_path / "mine"
    other.mkdir()
    (other / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows(kl=False)))
    (other / "samples.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in (5, 15)))
    mine.mkdir()
    (mine / "metrics.jsonl").write_text(json.dumps({"step": 12, "reward/mean": 0.1}) + "\n")
    RunLog(mine, 10, history_from=other)
    assert [r["step"] for r in read_metrics(mine)] == list(range(11))
    assert [json.loads(line)["step"] for line in (mine / "samples.jsonl").read_text().splitlines()] == [5]
    assert len(read_metrics(other)) == 21  # the other run's files are only read
    RunLog(mine, 10, history_from=mine)  # its own checkpoint: the usual resume
    assert [r["step"] for r in read_metrics(mine)] == list(range(11))
