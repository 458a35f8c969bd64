"""The ``mathrl`` subcommands: one module per stage, each a short ``main(cfg, ...) -> exit code``.

This is the one place where the layers below meet: a stage loads what it needs (data, models,
engines), hands the pieces to the libraries (``pipeline.grpo``, ``pipeline.sft``, ``evals``) and
writes what the user sees. ``pipeline/cli.py`` parses the command line and imports the stage it
runs, lazily, so ``mathrl data`` does not pay for torch. Nothing below this package imports it.
"""
