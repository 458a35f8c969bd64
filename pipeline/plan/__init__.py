"""`mathrl plan`: estimated GPU memory of a run per component and phase, before renting the GPU.

``memory.py`` is the arithmetic (no torch, no I/O), ``shapes.py`` reads a model's shape from its
config (a local directory or a shipped snapshot of a hub config), ``report.py`` is the stage.
"""
