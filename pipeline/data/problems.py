"""The one problem loader: a prepared dataset split, or a JSONL file in the prepared schema.

Every stage reads problems through ``load_problems``: GRPO (the train split), SFT (train and
test), the evals (any split, few-shot examples from train) and the tiny model's tokenizer
corpus. A record is ``{"id", "question", "answer", ...}`` (the schema ``prepare`` writes); a
record without a question or an answer stops the load with its id, and one without an id
gets ``<dataset>/<split>/<index>``. ``gsm8k+math`` names a mixture: each part's split, interleaved
so that every prefix holds the parts in proportion to their sizes (GRPO shuffles anyway; a limited
eval of a mixture then samples every part).
"""

from __future__ import annotations

from pathlib import Path

from pipeline.config.schema import MIX
from rewards.jsonl import JSONLError, read_jsonl as read_records

SYNTH = "gsm-synth"
# Which prepared dataset supplies the few-shot examples for each eval dataset (its train split;
# MATH-500 borrows MATH's, which the data stage deduplicated against MATH-500).
FEW_SHOT_SOURCE = {"gsm8k": "gsm8k", "math": "math", "math500": "math", "gsm-synth": "gsm-synth"}


class DataError(RuntimeError):
    """A missing input or an unusable dataset request."""


def prepared_path(prepared_dir: str, dataset: str, split: str) -> Path:
    return Path(prepared_dir) / dataset / f"{split}.jsonl"


def read_jsonl(path: str | Path) -> list[dict]:
    """The records of a JSONL file; a malformed line is a DataError naming the file and line."""
    try:
        return read_records(path)
    except JSONLError as e:
        raise DataError(str(e)) from None


def load_problems(prepared_dir: str, dataset: str, split: str, *, limit: int = 0, synth=None) -> list[dict]:
    """The first ``limit`` records (all when 0) of ``split`` of a prepared dataset, or of the JSONL
    file ``dataset`` names (a path ending in .jsonl is that file, whatever the split).

    ``synth``: a ``DataConfig``; when given and the prepared gsm-synth files are missing, gsm-synth
    is generated in memory from it (``mathrl sft`` and ``build-tiny`` on a fresh clone); when they
    were prepared from other ``data.synth_*`` settings, a DataError (never another config's problems)."""
    if MIX in dataset:
        problems = interleave([load_problems(prepared_dir, part, split, synth=synth) for part in dataset.split(MIX)])
        return problems[:limit] if limit else problems
    path = Path(dataset) if dataset.endswith(".jsonl") else prepared_path(prepared_dir, dataset, split)
    if path.is_file():
        if dataset == SYNTH and synth is not None:
            from pipeline.data.prepare import check_synth_current

            check_synth_current(synth, prepared_dir)
        problems = read_jsonl(path)
    elif dataset == SYNTH and synth is not None:
        from pipeline.data import synth as generator

        if split == generator.LONGER:
            problems = generator.generate_longer(synth)
        else:
            train, test = generator.generate(synth)
            problems = train if split == "train" else test
    elif dataset.endswith(".jsonl"):
        raise DataError(f"data file not found: {path}")
    else:
        raise DataError(f"prepared data not found: {path}; run `make data` (or `mathrl data`) first")
    if limit:
        problems = problems[:limit]
    for i, p in enumerate(problems):
        missing = [key for key in ("question", "answer") if not p.get(key)]
        if missing:
            raise DataError(f"{dataset} problem {p.get('id', i)!r} lacks {', '.join(missing)}")
        p.setdefault("id", f"{dataset}/{split}/{i}")
    return problems


def interleave(parts: list[list[dict]]) -> list[dict]:
    """The parts merged, each in its own order, so that any prefix holds them in proportion."""
    keyed = sorted(((i + 0.5) / len(part), k, i) for k, part in enumerate(parts) for i in range(len(part)))
    return [parts[k][i] for _, k, i in keyed]
