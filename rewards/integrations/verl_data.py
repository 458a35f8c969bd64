"""Prepared data (`data/prepared/<dataset>/<split>.jsonl`) -> verl's RL parquet layout.

One row per problem, in the layout verl's own preprocess scripts write:

    {"data_source": "openai/gsm8k",                       # picks the reward's answer style
     "prompt": [{"role": "user", "content": question + "\\n" + instruction}],
     "ability": "math",
     "reward_model": {"style": "rule", "ground_truth": "72"},
     "extra_info": {"split", "index", "id", "question", "solution", "level", "subject"}}

`data_source` is the Hub id verl's scripts use for the dataset (`DATA_SOURCES`), so the result
also works with verl's built-in scorers; `rewards.integrations.verl.compute_score` knows every
one of them. The instruction is the one mathrl's own prompt template for that answer style
uses (override with `instruction=`). Needs pyarrow (`pip install 'mathrl[verl]'`).
"""

from __future__ import annotations

from pathlib import Path

from rewards.jsonl import read_jsonl

# prepared dataset name -> (data_source, answer style)
DATA_SOURCES = {
    "gsm8k": ("openai/gsm8k", "gsm8k"),
    "gsm-synth": ("mathrl/gsm-synth", "gsm8k"),
    "math": ("DigitalLearningGmbH/MATH-lighteval", "math"),
    "math500": ("HuggingFaceH4/MATH-500", "math"),
}
# the same text as the "gsm8k" and "math" templates of pipeline.prompts (not imported: the
# rewards package never imports the pipeline)
INSTRUCTIONS = {
    "gsm8k": "Solve step by step. End with a line of the form '#### <answer>'.",
    "math": "Please reason step by step, and put your final answer within \\boxed{}.",
}


def verl_row(record: dict, index: int, instruction: str | None = None) -> dict:
    """One prepared record -> one verl row (module docstring)."""
    source = record.get("source")
    if source not in DATA_SOURCES:
        raise ValueError(f"record {record.get('id')!r}: unknown source {source!r}; "
                         f"known: {', '.join(DATA_SOURCES)}")
    if not record.get("answer"):
        raise ValueError(f"record {record.get('id')!r} has no gold answer")
    data_source, style = DATA_SOURCES[source]
    text = INSTRUCTIONS[style] if instruction is None else instruction
    question = record["question"]
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": f"{question}\n{text}" if text else question}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(record["answer"])},
        "extra_info": {"split": record.get("split"), "index": index, "id": record.get("id"),
                       "question": question, "solution": record.get("solution"),
                       "level": record.get("level"), "subject": record.get("subject")},
    }


def convert(src: str | Path, dst: str | Path, instruction: str | None = None) -> int:
    """Write `src` (prepared JSONL) as verl parquet at `dst`; returns the number of rows."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError("writing verl parquet needs pyarrow: pip install 'mathrl[verl]'") from None
    records = read_jsonl(src)  # a JSONLError (a ValueError) names the file and line
    if not records:
        raise ValueError(f"{src}: no records")
    rows = [verl_row(r, i, instruction) for i, r in enumerate(records)]
    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), str(dst))
    return len(rows)
