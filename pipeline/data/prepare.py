"""Data stage (`mathrl data`): GSM8K, MATH, MATH-500 and gsm-synth -> one uniform JSONL schema.

Raw rows come through ``datasets.load_dataset``: from the gzipped JSONL files shipped in
``data/raw/`` (``data.source=local``, the default, works offline) or from the Hugging Face Hub
ids (``data.source=hub``). Each row is normalised to
``{"id", "source", "split", "question", "answer", "solution", "level"?, "subject"?}`` and
written to ``data/prepared/<dataset>/<split>.jsonl``. Rows whose gold answer cannot be read are
reported by id, never dropped silently. A fingerprint of the inputs beside each dataset
(``pipeline/freshness.py``) makes a re-run a no-op unless the inputs, the settings or this code
changed; ``manifest.json`` keeps the row counts.

`mathrl data` prepares ``data.datasets`` (all four by default); the other stages call
``prepare_for`` first, which prepares just the datasets that stage reads (``datasets_for``:
``train.task``, ``sft.task``, ``eval.dataset`` with their mixture parts and few-shot sources),
under a file lock so that torchrun's ranks prepare once, and reads the user's own JSONL files
those keys name (``files_for``), so a missing file or a malformed line stops the stage with one
line before any model loads.
"""

from __future__ import annotations

import dataclasses
import fcntl
import inspect
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import get_args

from pipeline import freshness
from pipeline.config import DataConfig, RunConfig
from pipeline.config.schema import MIX, Dataset
from pipeline.data.problems import FEW_SHOT_SOURCE, SYNTH, DataError, load_problems, prepared_path
from rewards.answers.extract import reference_answer


@dataclass(frozen=True)
class Source:
    """Where one split of one dataset comes from, locally and on the Hub."""

    local: str  # path under data.raw_dir
    hub_id: str
    hub_config: str | None
    hub_split: str


SOURCES: dict[str, dict[str, Source]] = {
    "gsm8k": {
        "train": Source("gsm8k/train.jsonl.gz", "openai/gsm8k", "main", "train"),
        "test": Source("gsm8k/test.jsonl.gz", "openai/gsm8k", "main", "test"),
    },
    "math": {
        "train": Source("math/full/train.jsonl.gz", "DigitalLearningGmbH/MATH-lighteval", "default", "train"),
        "test": Source("math/full/test.jsonl.gz", "DigitalLearningGmbH/MATH-lighteval", "default", "test"),
    },
    "math500": {
        "test": Source("math/math500/test.jsonl.gz", "HuggingFaceH4/MATH-500", None, "test"),
    },
}

@dataclass(frozen=True)
class Licence:
    """The licence a prepared dataset is under (model cards list it)."""

    spdx: str
    holder: str
    files: tuple[str, ...] = ()  # licence texts under data.raw_dir (data/raw/SOURCES.md has the provenance)


LICENCES: dict[str, Licence] = {
    "gsm8k": Licence("MIT", "OpenAI (GSM8K, grade-school-math)", ("gsm8k/LICENSE-openai-grade-school-math.txt",)),
    "math": Licence("MIT", "Dan Hendrycks (MATH)", ("math/full/LICENSE-hendrycks-math.txt",)),
    "math500": Licence("MIT", "OpenAI (MATH-500, from PRM800K; problems from MATH, MIT)",
                       ("math/math500/LICENSE-openai-prm800k.txt",)),
    "gsm-synth": Licence("MIT", "mathrl (synthetic: pipeline/data/synth.py, under mathrl's licence)"),
}

# Two MATH train solutions end in an empty \boxed{} in the original release (multiple-choice
# problems whose choice text was lost). Both solutions conclude that no such prime exists, so
# choice (A) 0 is the answer; the stage prints when it applies these.
GOLD_ERRATA = {"train/number_theory/7115.json": "0", "train/number_theory/7117.json": "0"}


def gsm8k_gold(answer: str) -> str | None:
    """Text after the last ``####``, thousands separators removed."""
    if "####" not in answer:
        return None
    gold = answer.rsplit("####", 1)[1].strip().replace(",", "")
    return gold or None


def math_level(level) -> int | None:
    """``"Level 3"`` or ``3`` -> 3; ``"Level ?"`` -> None."""
    if isinstance(level, int):
        return level
    m = re.search(r"\d+", str(level or ""))
    return int(m.group()) if m else None


def normalise(dataset: str, split: str, index: int, row: dict) -> dict:
    """One raw row -> the prepared schema (``answer`` may be None: the caller reports it)."""
    if dataset == "gsm8k":
        solution = row["answer"]
        return {"id": f"gsm8k/{split}/{index}", "source": "gsm8k", "split": split,
                "question": row["question"], "answer": gsm8k_gold(solution), "solution": solution}
    solution = row["solution"]
    gold = row.get("answer") or reference_answer(solution)
    return {"id": row.get("unique_id") or f"{dataset}/{split}/{index}", "source": dataset, "split": split,
            "question": row["problem"], "answer": gold.strip() if gold else None, "solution": solution,
            "level": math_level(row.get("level")), "subject": row.get("subject") or row.get("type")}


def load_raw(cfg: DataConfig, dataset: str, split: str) -> list[dict]:
    """Raw rows of one split, through ``datasets.load_dataset`` (local files or the Hub)."""
    import datasets

    src = SOURCES[dataset][split]
    if cfg.source == "local":
        path = Path(cfg.raw_dir) / src.local
        if not path.is_file():
            raise DataError(f"missing raw data file {path}: it ships with the repository "
                            f"(restore it with `git checkout -- {path}`), or use data.source=hub "
                            f"to download {src.hub_id} from the Hugging Face Hub")
        ds = datasets.load_dataset("json", data_files=str(path), split="train")
    else:
        ds = datasets.load_dataset(src.hub_id, src.hub_config, split=src.hub_split)
    return list(ds)


def _question_key(text: str) -> str:
    return " ".join(text.split())


def prepare_split(cfg: DataConfig, dataset: str, split: str, exclude: set[str] = frozenset()
                  ) -> tuple[list[dict], list[str], int]:
    """(records, ids whose gold answer could not be read, questions dropped by dedup)."""
    records, bad, dropped = [], [], 0
    for i, row in enumerate(load_raw(cfg, dataset, split)):
        rec = normalise(dataset, split, i, row)
        if not rec["answer"] and rec["id"] in GOLD_ERRATA:
            rec["answer"] = GOLD_ERRATA[rec["id"]]
            print(f"  {rec['id']}: empty \\boxed{{}} in the source; gold {rec['answer']!r} from GOLD_ERRATA")
        if _question_key(rec["question"]) in exclude:
            dropped += 1
            continue
        if not rec["answer"]:
            bad.append(rec["id"])
            continue
        records.append(rec)
    return records, bad, dropped


def write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w") as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    tmp.replace(path)


def _fingerprint(cfg: DataConfig, dataset: str) -> str:
    """``freshness.fingerprint`` of everything the outputs of ``dataset`` depend on: its settings,
    this code, the gold-answer reader and the raw files."""
    gold_code = Path(inspect.getsourcefile(reference_answer))  # rewards/answers/statements.py (+ boxed.py)
    code = [Path(__file__), gold_code, gold_code.with_name("boxed.py")]
    if dataset == SYNTH:
        code.append(Path(__file__).parent / "synth.py")
        settings = {k: v for k, v in asdict(cfg).items() if k.startswith("synth_")}
    else:
        settings = [cfg.source, cfg.dedup_math_train]
        if cfg.source == "local":
            code += [Path(cfg.raw_dir) / s.local for s in SOURCES[dataset].values()]
            if dataset == "math":
                code.append(Path(cfg.raw_dir) / SOURCES["math500"]["test"].local)
    return freshness.fingerprint({"dataset": dataset, "settings": settings}, code)


def check_synth_current(cfg: DataConfig, prepared_dir: str) -> None:
    """DataError unless the gsm-synth prepared under ``prepared_dir`` was made from ``cfg``'s
    ``synth_*`` settings (and this code): a stage handed another config's problems would train and
    report on them silently."""
    out = Path(prepared_dir) / SYNTH
    if not freshness.is_current(out, _fingerprint(cfg, SYNTH)):
        raise DataError(f"{out} was prepared from other data.synth_* settings (or older code) than this "
                        "config's; run `mathrl data --config <this config>` (`make data CONFIG=...`) first")


def _prepare_dataset(cfg: DataConfig, dataset: str) -> dict[str, int]:
    """Write every split of one dataset; return {split: count} and print what happened."""
    counts = {}
    if dataset == SYNTH:
        from pipeline.data import synth

        splits = dict(zip(("train", "test"), synth.generate(cfg)))
        if cfg.synth_longer_size:
            splits[synth.LONGER] = synth.generate_longer(cfg)
        for split, records in splits.items():
            write_jsonl(prepared_path(cfg.prepared_dir, dataset, split), records)
            counts[split] = len(records)
        return counts
    exclude: set[str] = set()
    if dataset == "math" and cfg.dedup_math_train:
        exclude = {_question_key(r["problem"]) for r in load_raw(cfg, "math500", "test")}
    for split in SOURCES[dataset]:
        records, bad, dropped = prepare_split(cfg, dataset, split, exclude if split == "train" else set())
        if bad:
            print(f"  {dataset}/{split}: {len(bad)} records without a readable gold answer, "
                  f"not written: {', '.join(bad[:20])}{' ...' if len(bad) > 20 else ''}")
        if dropped:
            print(f"  {dataset}/{split}: {dropped} questions dropped because they appear in MATH-500")
        elif exclude and split == "train":
            print(f"  {dataset}/{split}: dedup against MATH-500 removed 0 questions")
        write_jsonl(prepared_path(cfg.prepared_dir, dataset, split), records)
        counts[split] = len(records)
    return counts


def prepare(cfg: DataConfig, force: bool = False) -> dict[str, dict[str, int]]:
    """Prepare every dataset in ``cfg.datasets``; skip those whose inputs did not change."""
    manifest_path = Path(cfg.prepared_dir) / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    summary = {}
    for dataset in cfg.datasets:
        fp, out = _fingerprint(cfg, dataset), Path(cfg.prepared_dir) / dataset
        counts = manifest.get(dataset, {}).get("counts")
        if not force and counts and freshness.is_current(out, fp) and all(
                prepared_path(cfg.prepared_dir, dataset, s).is_file() for s in counts):
            print(f"{dataset}: up to date {counts}")
            summary[dataset] = counts
            continue
        counts = _prepare_dataset(cfg, dataset)
        print(f"{dataset}: wrote {counts} to {out}")
        manifest[dataset] = {"counts": counts}
        manifest_path.parent.mkdir(parents=True, exist_ok=True)
        manifest_path.write_text(json.dumps(manifest, indent=2))
        freshness.mark_current(out, fp)
        summary[dataset] = counts
    return summary


def _evaluated(cfg: RunConfig, dataset: str) -> list[str]:
    """``dataset`` as an eval reads it: its parts, and their few-shot sources when prompts have examples."""
    parts = dataset.split(MIX)
    return parts + [FEW_SHOT_SOURCE[p] for p in parts if cfg.prompt.few_shot and p in FEW_SHOT_SOURCE]


def _stages(cfg: RunConfig, stage: str) -> list[str]:
    """The `mathrl run` stages that `mathrl <stage>` runs."""
    if stage == "run":
        return cfg.stages
    if stage == "experiment":  # its own GRPO runs, evaluated on train.task
        return [s for s in cfg.stages if s in ("build-tiny", "sft")] + ["train"]
    if stage in ("seed-grid", "compare-objectives", "compare-sampling"):  # tiny models, SFT, GRPO and `mathrl run`'s evals of each cell
        return ["build-tiny", "sft", "train", "eval"]
    return [stage]


def _read_by(cfg: RunConfig, stage: str) -> list[str]:
    """Every dataset part and JSONL path `mathrl <stage>` reads under ``cfg``."""
    names = []
    for s in _stages(cfg, stage):
        if s == "build-tiny":  # the tokenizer's corpus
            names.append(SYNTH)
        elif s == "sft":
            names += cfg.sft.task.split(MIX)
        elif s == "train":  # the periodic eval reads the task's test split
            evaluated = cfg.train.eval_every or stage == "experiment"
            names += _evaluated(cfg, cfg.train.task) if evaluated else cfg.train.task.split(MIX)
        elif s == "eval":
            names += _evaluated(cfg, cfg.eval.dataset)
    return names


def datasets_for(cfg: RunConfig, stage: str) -> list[str]:
    """The prepared datasets `mathrl <stage>` reads under ``cfg``, in the schema's order."""
    names = _read_by(cfg, stage)
    return [name for name in get_args(Dataset) if name in names]


def files_for(cfg: RunConfig, stage: str) -> list[str]:
    """The user's own JSONL files `mathrl <stage>` reads under ``cfg``."""
    return list(dict.fromkeys(name for name in _read_by(cfg, stage) if name.endswith(".jsonl")))


def check_files(cfg: RunConfig, stage: str) -> None:
    """Read every JSONL file the stage will read, and see that what it trains on has a train split:
    a missing file, a malformed line, a record without question or answer or a test-only dataset
    is a DataError of one line (the file, the line, the record or the key)."""
    for key, task in (("sft.task", cfg.sft.task), ("train.task", cfg.train.task)):
        if key.partition(".")[0] in _stages(cfg, stage):
            for part in task.split(MIX):
                if part in SOURCES and "train" not in SOURCES[part]:
                    raise DataError(f"{key}={task}: {part} has no train split (only {', '.join(SOURCES[part])}); "
                                    "train on a dataset that has one and evaluate on this one")
    for path in files_for(cfg, stage):
        load_problems(cfg.data.prepared_dir, path, "train")  # the split is ignored for a file


def prepare_for(cfg: RunConfig, stage: str) -> dict[str, dict[str, int]]:
    """Check the user's files ``stage`` reads, then prepare the datasets it reads (a no-op for what is
    up to date); ranks started together take turns."""
    check_files(cfg, stage)
    names = datasets_for(cfg, stage)
    if not names:
        return {}
    lock_dir = Path(cfg.data.prepared_dir)
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        return prepare(dataclasses.replace(cfg.data, datasets=names))
