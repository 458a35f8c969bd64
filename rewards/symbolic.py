"""The symbolic equivalence path, run in killable worker processes.

math-verify/sympy can take unbounded time and memory on hostile input (`9^{9^{9^9}}`), and
math-verify's own timeout uses `signal.alarm`, which only works in the main thread. So the
symbolic check never runs in the caller: a small pool of worker processes (forked from a
forkserver that has sympy and math-verify preloaded, so a respawn costs milliseconds) takes
one (pred, gold) pair at a time. The caller waits on the pipe with a hard wall deadline; on
timeout it SIGKILLs the worker and starts a fresh one. Each worker caps its address space
(RLIMIT_AS), so a blow-up ends in MemoryError inside the worker, not in the caller.

Thread-safe: any number of threads may call `SymbolicPool.compare` at once; each borrows one
idle worker. A call never takes longer than its timeout (plus a few milliseconds).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import threading
import time

EQUAL, NOT_EQUAL, PARSE_ERROR, TIMEOUT = "equal", "not equal", "parse error", "timeout"
_READY = "ready"


def symbolic_equal(pred: str, gold: str) -> str:
    """Compare two normalised answers with math-verify, exactly (runs inside a worker)."""
    import sympy
    from math_verify import parse, verify

    g = parse("$" + gold + "$", parsing_timeout=None)
    p = parse("$" + pred + "$", parsing_timeout=None)
    if not g or not p:
        return PARSE_ERROR
    g, p = _exact(g, sympy), _exact(p, sympy)
    ok = verify(g, p, timeout_seconds=None, float_rounding=15)
    return EQUAL if ok else NOT_EQUAL


def _exact(parsed: list, sympy) -> list:
    """Floats become exact rationals (so 0.333 != 1/3, 3.14 != pi); `i` becomes the unit."""
    out = []
    for x in parsed:
        if isinstance(x, sympy.Basic):
            floats = x.atoms(sympy.Float)
            if floats:
                x = x.xreplace({f: sympy.Rational(str(f)) for f in floats})
            units = {v: sympy.I for v in x.free_symbols if getattr(v, "name", "") == "i"}
            if units:
                x = x.xreplace(units)
        out.append(x)
    return out


def _worker_main(conn, memory_mb: int) -> None:
    try:
        import resource

        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):
        pass
    import logging

    import math_verify  # noqa: F401  (already loaded in the forkserver; cheap here)

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)  # "timeout disabled" notes

    conn.send(_READY)
    while True:
        try:
            pred, gold = conn.recv()
        except (EOFError, OSError):
            return
        try:
            result = symbolic_equal(pred, gold)
        except MemoryError:
            result = TIMEOUT
        except Exception:  # noqa: BLE001 - any sympy failure means "cannot decide"
            result = PARSE_ERROR
        conn.send(result)


class _Worker:
    def __init__(self, ctx, memory_mb: int):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, memory_mb), daemon=True)
        self.proc.start()
        child.close()
        self.ready = False

    def wait_ready(self, deadline: float) -> bool:
        if not self.ready and self.conn.poll(max(0.0, deadline - time.monotonic())):
            self.ready = self.conn.recv() == _READY
        return self.ready

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.join(timeout=1.0)
        except Exception:  # noqa: BLE001
            pass
        self.conn.close()


def _context():
    methods = mp.get_all_start_methods()
    if "forkserver" in methods:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["sympy", "math_verify", "rewards.symbolic"])
        return ctx
    return mp.get_context("spawn")


class SymbolicPool:
    """A fixed number of killable worker processes for symbolic checks."""

    def __init__(self, workers: int = 2, memory_mb: int = 2048):
        self.size = max(1, workers)
        self.memory_mb = memory_mb
        self._ctx = _context()
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._lock = threading.Lock()
        self._all: list[_Worker] = []
        self.kills = 0
        self._owner_pid = os.getpid()
        for _ in range(self.size):
            self._spawn()

    def _spawn(self) -> None:
        with self._lock:
            w = _Worker(self._ctx, self.memory_mb)
            self._all.append(w)
        self._idle.put(w)

    def _retire(self, w: _Worker) -> None:
        w.kill()
        with self._lock:
            if w in self._all:
                self._all.remove(w)

    def resize(self, workers: int) -> None:
        """Grow the pool to at least `workers` processes (it never shrinks while in use)."""
        while len(self._all) < workers:
            self._spawn()
            self.size += 1

    def compare(self, pred: str, gold: str, timeout: float) -> str:
        """EQUAL / NOT_EQUAL / PARSE_ERROR / TIMEOUT, within `timeout` seconds of wall time."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                w = self._idle.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return TIMEOUT
            if not w.wait_ready(deadline):
                self._idle.put(w)  # still starting; another caller may get it ready in time
                return TIMEOUT
            try:
                w.conn.send((pred, gold))
                if w.conn.poll(max(0.0, deadline - time.monotonic())):
                    result = w.conn.recv()
                    self._idle.put(w)
                    return result
            except (EOFError, OSError, BrokenPipeError):
                self._retire(w)
                self._spawn()
                if time.monotonic() >= deadline:
                    return TIMEOUT
                continue  # the worker died (e.g. killed by the OS); retry on a fresh one
            self.kills += 1
            self._retire(w)
            self._spawn()
            return TIMEOUT

    def close(self) -> None:
        with self._lock:
            workers, self._all = self._all, []
        for w in workers:
            w.kill()


_POOL: SymbolicPool | None = None
_POOL_LOCK = threading.Lock()


def get_pool(workers: int | None = None) -> SymbolicPool:
    """The process-wide pool, created on first use (size from MATHRL_REWARD_WORKERS or 2)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL._owner_pid != os.getpid():
            size = workers or int(os.environ.get("MATHRL_REWARD_WORKERS", "2"))
            _POOL = SymbolicPool(size)
        elif workers and workers > len(_POOL._all):
            _POOL.resize(workers)
        return _POOL
