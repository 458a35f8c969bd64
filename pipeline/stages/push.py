"""`mathrl push RUN_DIR --repo ID`: upload a run's ``final/`` folder to the Hugging Face Hub.

``final/`` is a complete model repository: the weights and tokenizer (``save_pretrained``), the
model card ``README.md`` (``pipeline/card.py``, written when training ends), the eval reports it
links and the resolved config. This creates the repository if needed and uploads the folder with
``huggingface_hub.upload_folder``; the token is huggingface_hub's own (``HF_TOKEN`` or
``hf auth login``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from pipeline import layout
from pipeline.card import CARD


class PushError(RuntimeError):
    """The run directory cannot be pushed; the message says why in one line."""


def push_run(run_dir: str | Path, repo_id: str, *, private: bool = False) -> str:
    """Upload ``run_dir/final`` to the model repository ``repo_id``; returns the commit URL."""
    from huggingface_hub import create_repo, upload_folder

    final = layout.final_dir(Path(run_dir))
    if not final.is_dir():
        raise PushError(f"no {final}: push a run directory whose training finished")
    if not (final / CARD).is_file():
        raise PushError(f"no model card {final / CARD}: `mathrl train` writes it when training ends")
    try:
        create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        info = upload_folder(repo_id=repo_id, folder_path=str(final), repo_type="model",
                             commit_message=f"mathrl run {Path(run_dir).name}")
    except Exception as e:  # no token, no network, no permission: one line, not a traceback
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PushError(f"upload of {final} to {repo_id} failed: {first}") from e
    return str(getattr(info, "commit_url", info))


def main(run_dir: str, repo: str, private: bool = False) -> int:
    try:
        print(push_run(run_dir, repo, private=private))
    except PushError as e:
        print(f"mathrl push: {e}", file=sys.stderr)
        return 1
    return 0
