"""Rule-based reward checkers for math reasoning, usable without the trainer (issue 3).

Never imports torch; may import `sandbox` for the code-execution reward.
"""

from rewards.boxed import last_boxed

__all__ = ["last_boxed"]
