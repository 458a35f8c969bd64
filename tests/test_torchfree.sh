#!/usr/bin/env bash
# `make test-torchfree`: build the wheel, install it into a fresh venv WITHOUT the train extra, and
# check from outside the source tree that the rewards and sandbox CLIs and the TRL / verl adapters
# work there, that torch and transformers are absent, and that `mathrl` says which extra it needs.
# PYTHON picks the interpreter for the venv (default python3); needs PyPI or a warm pip cache.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/mathrl-torchfree.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
unset PYTHONPATH
fail() { echo "test-torchfree: FAIL: $*" >&2; exit 1; }

t0=$(date +%s)
"${PYTHON:-python3}" -m venv "$WORK/venv"
PY="$WORK/venv/bin/python"
# build from a copy of what the wheel holds, so the checkout gets no build/ or egg-info
mkdir "$WORK/src" && (cd "$ROOT" && cp -r pyproject.toml README.md pipeline rewards sandbox evals "$WORK/src/")
"$PY" -m pip wheel -q --no-deps -w "$WORK/dist" "$WORK/src"
t1=$(date +%s)
"$PY" -m pip install -q "$WORK"/dist/mathrl-*.whl
t2=$(date +%s)
echo "venv + wheel in $((t1 - t0)) s, installed in $((t2 - t1)) s; venv $(du -sm "$WORK/venv" | cut -f1) MB"

cd "$WORK"  # import the installed package, never the checkout
"$PY" - <<'EOF' || fail "torch or transformers importable in the plain install"
import importlib.util, sys
present = [m for m in ("torch", "transformers", "datasets", "peft", "trl", "pyarrow")
           if importlib.util.find_spec(m) is not None]
sys.exit(f"installed without the extra, yet present: {present}" if present else 0)
EOF

printf '%s\n' '{"completion": "so x = \\boxed{\\dfrac{1}{2}}", "answer": "0.5"}' \
  '{"completion": "Step 1: 3 + 4 = 7\n#### 7", "answer": "8"}' > completions.jsonl
out=$("$PY" -m rewards score completions.jsonl --workers 1)
echo "$out"
grep -q "accuracy 0.5000 (1/2)" <<<"$out" || fail "rewards score: expected accuracy 0.5000 (1/2)"
"$PY" -m rewards equiv '\frac{1}{2}' 0.5 >/dev/null || fail "rewards equiv 1/2 0.5"

printf 'import math\nprint(math.factorial(10))\n' > job.py
# the process backend only if docker and bwrap are both unavailable: this checks the install, not isolation
out=$(MATHRL_SANDBOX_ALLOW_PROCESS=1 "$PY" -m sandbox run job.py --timeout 10 2>&1)
echo "$out"
grep -q "^3628800$" <<<"$out" || fail "sandbox run: expected 3628800"

"$PY" - <<'EOF' || fail "the adapters"
import sys
from rewards.integrations.trl import accuracy_reward, format_reward
from rewards.integrations.verl import compute_score
chat = [[{"role": "assistant", "content": "It is \\boxed{\\frac12}."}], [{"role": "assistant", "content": "#### 3"}]]
assert accuracy_reward(prompts=["q", "q"], completions=chat, answer=["0.5", None]) == [1.0, None]
assert format_reward(prompts=["q", "q"], completions=chat) == [1.0, 1.0]
assert compute_score("openai/gsm8k", "... #### 72", "72", {"split": "test", "index": 0})["score"] == 1.0
loaded = sorted(m for m in ("torch", "transformers", "pipeline", "trl", "verl") if m in sys.modules)
assert not loaded, loaded
print("adapters ok")
EOF

if "$PY" -m rewards to-verl completions.jsonl 2>err.txt; then fail "to-verl without pyarrow succeeded"; fi
grep -q "mathrl\[verl\]" err.txt || fail "to-verl without pyarrow: $(cat err.txt)"
if "$WORK/venv/bin/mathrl" data 2>err.txt; then fail "mathrl data without the train extra succeeded"; fi
grep -q "mathrl\[train\]" err.txt || fail "mathrl without the train extra: $(cat err.txt)"
echo "mathrl without the extra: $(cat err.txt)"
echo "test-torchfree: ok in $(($(date +%s) - t0)) s"
