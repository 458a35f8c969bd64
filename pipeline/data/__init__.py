"""Problems: preparing the datasets (``prepare``: GSM8K, MATH, MATH-500 -> one JSONL schema), the
synthetic gsm-synth generator (``synth``) and the one loader every stage reads them with
(``problems.load_problems``).

Near the bottom of the layers: imports only ``pipeline.config`` and ``rewards``.
"""
