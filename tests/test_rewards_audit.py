"""The second-grader audit (rewards.outcome.audit): math-verify's verdict on whole completions, run in
the killable workers, against ours; and the watch that flags a climbing disagreement rate."""

from __future__ import annotations

import time

from rewards import check
from rewards.outcome.audit import DisagreementWatch, audit


def test_audit_finds_the_cases_where_the_graders_disagree():
    texts = ["So the answer is $\\boxed{18}$.",  # both pay
             "So the answer is $\\boxed{17}$.",  # neither pays
             "The answer is 18.",  # math-verify pays; strict (no box) does not
             ]
    golds = ["18", "18", "18"]
    ours = [check(t, g, policy="strict").score for t, g in zip(texts, golds)]
    assert ours == [1.0, 0.0, 0.0]
    result = audit(texts, golds, ours, sample=10)
    assert result.checked == 3
    assert [c["index"] for c in result.cases] == [2] and result.cases[0]["math_verify"] == 1.0
    assert abs(result.rate - 1 / 3) < 1e-9


def test_audit_samples_and_stays_bounded_on_hostile_text():
    texts = ["$\\boxed{9^{9^{9^{9}}}}$"] * 3 + ["$\\boxed{1}$"] * 5
    t0 = time.monotonic()
    result = audit(texts, ["1"] * 8, [0.0] * 8, sample=4, seed=1, timeout=1.0)
    assert result.checked == 4
    assert time.monotonic() - t0 < 4 * 1.0 + 10  # one deadline per completion (+ a cold worker start)


def test_watch_warns_only_when_the_rate_climbs():
    watch = DisagreementWatch(warmup=3)
    assert [watch.add(r) for r in (0.02, 0.03, 0.02, 0.03, 0.04)] == [None] * 5
    assert "hole" in watch.add(0.20)


def test_training_step_audit_logs_the_rate_and_writes_the_cases(tmp_path):
    import pytest

    from pipeline.config import ConfigError, RewardConfig
    from pipeline.grpo.episodes import Episode
    from pipeline.grpo.reward_audit import RewardAudit

    eps = [Episode(problem_id="p", group=0, sample=k, prompt="", completion=t, prompt_ids=[], completion_ids=[1],
                   finish_reason="stop", gold="18", rewards={"correct": c})
           for k, (t, c) in enumerate([("The answer is 18.", 0.0), ("$\\boxed{18}$", 1.0)])]
    step_audit = RewardAudit(RewardConfig(), tmp_path)
    assert step_audit.step(1, eps) == {"reward/disagree_mv": 0.5}
    assert '"index": 0' in (tmp_path / "audit_mv.jsonl").read_text()
    assert RewardAudit(RewardConfig(audit_sample=0), tmp_path).step(2, eps) == {}
    with pytest.raises(ConfigError, match="audit_sample"):
        RewardConfig(audit_sample=-1)
    with pytest.raises(ConfigError, match="policy"):
        RewardConfig(policy="loose")
