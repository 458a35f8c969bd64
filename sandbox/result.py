"""The result record every backend returns, and the error raised when no backend can run."""

from __future__ import annotations

from dataclasses import asdict, dataclass


class SandboxUnavailable(RuntimeError):
    """The requested backend (or every backend `auto` may pick) cannot run on this machine."""


@dataclass(frozen=True)
class ExecResult:
    stdout: str
    stderr: str
    exit_code: int
    """Process exit status; negative for a signal (-9 after a kill), like `subprocess`."""
    timed_out: bool
    oom: bool
    """The kernel OOM-killed a process of the job in its slot cgroup (the slot's cap, as the
    host reads it from the cgroup). A `MemoryError` from the address-space rlimit is the job's
    own exception (any job can raise one), so it shows as exit 1 with its traceback, not here."""
    output_truncated: bool
    """stdout or stderr passed `max_output_bytes`; the job was killed at that point."""
    duration_ms: float
    backend: str
    isolation: str
    """Short honest label of what the backend enforces."""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not (self.timed_out or self.oom or self.output_truncated)

    def to_dict(self) -> dict:
        return asdict(self)
