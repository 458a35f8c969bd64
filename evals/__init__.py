"""GSM8K / MATH evaluation: pass@1, maj@k, pass@k, per-subject and per-level reports (issue 8)."""
