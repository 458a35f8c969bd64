"""Is this output current? The one answer for every stage that skips finished work.

A stage that can skip its work computes a fingerprint of everything its output depends on
(settings, seeds, the bytes of input files) and, when it finishes, writes it beside the output
(``mark_current``). Next time it asks ``is_current`` with a freshly computed fingerprint: the same
inputs give the same fingerprint, so the output is reused; any change (a setting, a seed, a
rebuilt input model) gives another one and the work is redone. The fingerprint is written last,
so an output whose writing was interrupted is never taken as current.

Where the fingerprint lives: ``<dir>/.inputs`` for a directory output, ``<file>.inputs`` beside a
file output.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Iterable

STAMP = ".inputs"


def fingerprint(settings, files: Iterable[str | Path] = ()) -> str:
    """A short hash of ``settings`` (anything JSON can write; dataclasses as ``asdict``) and of the
    bytes of each of ``files`` that exists (a missing file counts as absent, by name)."""
    h = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
    for f in files:
        path = Path(f)
        h.update(str(path.name).encode())
        h.update(path.read_bytes() if path.is_file() else b"\0missing")
    return h.hexdigest()[:16]


def stamp_path(output: str | Path) -> Path:
    """Where ``output``'s fingerprint is written."""
    output = Path(output)
    return output / STAMP if output.is_dir() or not output.suffix else output.with_name(output.name + STAMP)


def is_current(output: str | Path, fp: str) -> bool:
    """``output`` exists and was finished from inputs with fingerprint ``fp``."""
    stamp = stamp_path(output)
    return Path(output).exists() and stamp.is_file() and stamp.read_text().strip() == fp


def mark_current(output: str | Path, fp: str) -> None:
    """Record that ``output`` is complete and was made from inputs with fingerprint ``fp`` (call last)."""
    stamp = stamp_path(output)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    tmp = stamp.with_name(stamp.name + ".tmp")
    tmp.write_text(fp + "\n")
    os.replace(tmp, stamp)


__all__ = ["fingerprint", "is_current", "mark_current", "stamp_path"]
