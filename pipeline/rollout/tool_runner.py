"""Runs the policy's code blocks in the project's sandbox (``sandbox.Sandbox``, the pool the ``code``
reward uses), many at once.

``ToolRunner.run_all(codes)`` runs every block of a decode turn concurrently: one thread per block
up to the pool's size, each taking a warm worker slot of the pool (``Sandbox.run``), so N
completions waiting on code wait for about the slowest of them, not for their sum. Each block runs
in a fresh process with the sandbox's isolation between jobs (no state carries from one call to
the next, nor between completions), its wall-clock limit (``rollout.tool_timeout_s``) and output
cap. The model's code is hostile: a timeout, a crash, an out-of-memory kill or a sandbox worker
that fails on one job all become that call's output message (tool_format.py); only a sandbox that
cannot start at all (no backend on this machine) raises, since silently giving every call an error
would train the policy on a broken tool.

The pool is started on the first call and closed by ``close`` (the engine's ``close``).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pipeline.rollout.tool_format import ToolCall, last_error_line, output_body

MEMORY_MB = 512  # per call, as the code reward (rewards/outcome/code.py)


@dataclass(frozen=True)
class ToolSettings:
    """The ``rollout.tool*`` settings an engine needs (picklable: the hf_process worker gets a copy)."""

    max_calls: int = 4
    output_chars: int = 512
    timeout_s: float = 5.0
    workers: int = 4
    backend: str = "auto"


class ToolRunner:
    def __init__(self, settings: ToolSettings):
        self.settings = settings
        self._pool = None
        self.wall_s = 0.0  # seconds the rollout waited on run_all, all calls together (for the share in the sandbox)

    def pool(self):
        if self._pool is None:
            from sandbox import Sandbox

            self._pool = Sandbox(self.settings.backend, workers=self.settings.workers, memory_mb=MEMORY_MB)
        return self._pool

    def run_all(self, codes: list[str]) -> list[ToolCall]:
        """One ``ToolCall`` per code block, in order; the blocks run concurrently."""
        if not codes:
            return []
        pool = self.pool()
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max(1, min(len(codes), pool.workers))) as ex:
            calls = list(ex.map(self._run_one, codes))
        self.wall_s += time.perf_counter() - t0
        return calls

    def _run_one(self, code: str) -> ToolCall:
        from sandbox import SandboxUnavailable

        s = self.settings
        t0 = time.perf_counter()
        try:
            r = self.pool().run(code, timeout_s=s.timeout_s, memory_mb=MEMORY_MB,
                                max_output_bytes=4 * s.output_chars + 1024)
        except SandboxUnavailable:
            raise  # a setup error, not the model's: see the module notes
        except Exception as e:  # one job's failure is that call's message, never the step's
            line = str(e).splitlines()[0] if str(e) else ""
            return ToolCall(f"SandboxError: {type(e).__name__}: {line}"[:300], True, False,
                            time.perf_counter() - t0)
        seconds = time.perf_counter() - t0
        failed = r.exit_code != 0 and not (r.timed_out or r.oom or r.output_truncated)  # a kill has its own message
        body = output_body(r.stdout, error_line=last_error_line(r.stderr, r.exit_code) if failed else None,
                           timeout_s=s.timeout_s if r.timed_out else None, oom=r.oom,
                           killed_for_output=r.output_truncated, output_chars=s.output_chars)
        return ToolCall(body, failed or r.oom or r.output_truncated, r.timed_out, seconds)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
