"""Run untrusted, model-written Python with limits (work in progress: see issue 4)."""
