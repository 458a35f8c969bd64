"""mathrl's training pipeline: the stages of a verifiable-reward GRPO run.

The subpackages form layers that import only downwards; the table is written once, in the
```layers block of docs/architecture.md, and ``tests/test_layers.py`` checks every import against
it. The entry point is ``pipeline/cli.py`` (the ``mathrl`` command), which runs one module of
``pipeline/stages/``. This file imports nothing.
"""
