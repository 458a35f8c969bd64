"""A child process that ends by itself when the process that started it is gone.

A parent killed with SIGKILL (or SIGTERM, whose default action skips Python's clean-up) cannot
stop its children, and a child blocked in work (a batch, a sandbox call, a barrier) would not
notice for a long time. ``exit_with_parent`` starts a watcher thread: once the parent has gone (the
child was re-parented), it gives ``cleanup`` at most ``grace_s`` and ends the process with
``os._exit``. A plain return would be too late (the main thread finishes its work first) and could
hang for good: the interpreter's exit joins queue feeder threads, which block on full pipes nobody
reads. ``process_pool`` is a spawn ``ProcessPoolExecutor`` whose workers do the same: the seed
grid's and the experiment's runs stop with the command that started them, instead of training on,
unseen, for many minutes.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Callable

POLL_S = 0.5


def exit_with_parent(parent: int, cleanup: Callable[[], None] | None = None, grace_s: float = 5.0,
                     code: int = 0) -> None:
    """Start the watcher for ``parent`` (its pid, read in the parent before the child started)."""
    def watch():
        while os.getppid() == parent:
            time.sleep(POLL_S)
        if cleanup is not None:
            closer = threading.Thread(target=cleanup, daemon=True)
            closer.start()
            closer.join(grace_s)
        os._exit(code)

    threading.Thread(target=watch, daemon=True, name="mathrl-parent-watch").start()


def _start_pool_worker(parent: int, initializer: Callable[[], None] | None) -> None:
    exit_with_parent(parent, code=1)
    if initializer is not None:
        initializer()


def process_pool(workers: int, initializer: Callable[[], None] | None = None) -> ProcessPoolExecutor:
    """A spawn process pool of ``workers`` whose workers exit once this process is gone;
    ``initializer`` (a module-level function) runs in each worker after the watcher starts."""
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_start_pool_worker, initargs=(os.getpid(), initializer))


__all__ = ["exit_with_parent", "process_pool"]
