"""The symbolic equivalence path, run in killable worker processes.

math-verify/sympy can take unbounded time and memory on hostile input (`9^{9^{9^9}}`), and
math-verify's own timeout uses `signal.alarm`, which only works in the main thread. So the
symbolic check never runs in the caller: a small pool of worker subprocesses
(`python -m rewards.equivalence.symbolic`, plain interpreters, so the caller's script is never
re-imported the way multiprocessing spawn/forkserver children re-import `__main__`) takes one
(pred, gold) pair at a time over a JSON-lines pipe. The caller waits on the pipe with a hard
wall deadline (`select`); on timeout it SIGKILLs the worker and starts a fresh one in the
background (about a second of imports, off the caller's clock). Each worker caps its address
space (RLIMIT_AS), so a blow-up ends in MemoryError inside the worker, not in the caller.

Thread-safe: any number of threads may call `SymbolicPool.compare` at once; each borrows one
idle worker. A call never takes longer than its timeout (plus a few milliseconds).
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import select
import subprocess
import sys
import threading
import time

EQUAL, NOT_EQUAL, PARSE_ERROR, TIMEOUT = "equal", "not equal", "parse error", "timeout"
_READY = "ready"
STARTUP_S = 60.0  # a worker that has not imported sympy by then is replaced
# the directory that holds rewards/ (this file is rewards/equivalence/symbolic.py)
_PKG_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def symbolic_equal(pred: str, gold: str) -> str:
    """Compare two normalised answers with math-verify, exactly and in both directions (runs
    inside a worker)."""
    import sympy
    from math_verify import parse, verify

    g = parse("$" + gold + "$", parsing_timeout=None)
    p = parse("$" + pred + "$", parsing_timeout=None)
    if not g or not p:
        return PARSE_ERROR
    g, p = _exact(g, sympy), _exact(p, sympy)
    if _is_eq(g[0], sympy) != _is_eq(p[0], sympy):
        return NOT_EQUAL  # "2x+y=0" is not the answer "0"; only "x = 5" vs "5" (normalised away)
    # both directions: math-verify's verify(gold, pred) is lenient one way for some shapes
    # (an inequality against an interval), and equivalence must not depend on argument order
    ok = verify(g, p, timeout_seconds=None, float_rounding=15) and \
        verify(p, g, timeout_seconds=None, float_rounding=15)
    if ok and _provably_different(p[0], g[0], sympy):
        return NOT_EQUAL  # verify rounds numbers: 2\sqrt{3} + 10^{-100} is not 2\sqrt{3}
    return EQUAL if ok else NOT_EQUAL


def math_verify_grade(completion: str, gold: str) -> str:
    """math-verify's own verdict on a whole completion, as its README calls it (runs inside a
    worker; the second grader of `rewards.outcome.audit`)."""
    from math_verify import parse, verify

    g = parse(gold if "$" in gold or "\\boxed" in gold else "$" + gold + "$", parsing_timeout=None)
    p = parse(completion, parsing_timeout=None)
    if not g or not p:
        return PARSE_ERROR
    return EQUAL if verify(g, p, timeout_seconds=None) else NOT_EQUAL


def _provably_different(p, g, sympy) -> bool:
    """Two closed numbers whose difference sympy can show is not zero."""
    if not (isinstance(p, sympy.Expr) and isinstance(g, sympy.Expr)) or p.free_symbols or g.free_symbols:
        return False
    return (p - g).equals(0) is False


def _is_eq(x, sympy) -> bool:
    return isinstance(x, sympy.Equality)


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


def _worker_main(memory_mb: int) -> None:
    """Worker loop: one JSON request per stdin line, one JSON answer per stdout line."""
    try:
        import resource

        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):
        pass
    import logging

    _watch_parent(os.getppid())
    import math_verify  # noqa: F401  (imported before "ready" so the first check is fast)

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)  # "timeout disabled" notes
    symbolic_equal("\\frac{\\sqrt{2}}{2}", "x^2")  # first use builds the LaTeX parser: not on a clock
    out = os.fdopen(os.dup(1), "w")  # the protocol channel; stray prints go to stderr instead
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    out.write(json.dumps(_READY) + "\n")
    out.flush()
    for line in sys.stdin:
        try:
            request = json.loads(line)
            if len(request) == 3 and request[0] == "grade":  # ["grade", completion, gold]
                result = math_verify_grade(request[1], request[2])
            else:
                pred, gold = request
                result = symbolic_equal(pred, gold)
        except MemoryError:
            result = TIMEOUT
        except Exception:  # noqa: BLE001 - any sympy failure means "cannot decide"
            result = PARSE_ERROR
        out.write(json.dumps(result) + "\n")
        out.flush()


def _watch_parent(parent: int) -> None:
    """Exit when the parent dies, even in the middle of a runaway sympy computation."""
    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


class _Worker:
    """One worker subprocess (`python -m rewards.equivalence.symbolic`): a plain interpreter, so it never
    re-imports the caller's `__main__` the way multiprocessing's spawn/forkserver would."""

    def __init__(self, memory_mb: int):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PKG_PARENT, env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rewards.equivalence.symbolic", str(memory_mb)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=env, close_fds=True, start_new_session=True)
        self._buf = b""
        self.ready = False

    def _read_line(self, deadline: float) -> str | None:
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                raise EOFError("worker exited")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def wait_ready(self, deadline: float) -> bool:
        if not self.ready:
            self.ready = self._read_line(deadline) == _READY
        return self.ready

    def ask(self, pred: str, gold: str, deadline: float, grade: bool = False) -> str | None:
        request = ["grade", pred, gold] if grade else [pred, gold]
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        return self._read_line(deadline)

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(timeout=1.0)
        except Exception:  # noqa: BLE001
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except Exception:  # noqa: BLE001
                pass


class SymbolicPool:
    """A fixed number of killable worker processes for symbolic checks."""

    def __init__(self, workers: int = 2, memory_mb: int = 2048):
        self.size = max(1, workers)
        self.memory_mb = memory_mb
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._lock = threading.Lock()
        self._all: list[_Worker] = []
        self.kills = 0
        self._owner_pid = os.getpid()
        for _ in range(self.size):
            self._spawn()

    def _spawn(self) -> None:
        with self._lock:
            w = _Worker(self.memory_mb)
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

    def compare(self, pred: str, gold: str, timeout: float, grade: bool = False) -> str:
        """EQUAL / NOT_EQUAL / PARSE_ERROR / TIMEOUT, within `timeout` seconds of wall time
        (plus, only while a worker is still starting, its start-up: bounded by STARTUP_S).
        `grade=True`: `pred` is a whole completion, graded by math-verify alone (`math_verify_grade`)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                w = self._idle.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return TIMEOUT
            if not w.ready:
                try:
                    ready = w.wait_ready(time.monotonic() + STARTUP_S)
                except (EOFError, OSError, ValueError):
                    ready = False
                if not ready:
                    self._replace(w)
                    return TIMEOUT
                # a cold start must not turn easy checks into timeouts (silent zero rewards)
                deadline = max(deadline, time.monotonic() + timeout)
            try:
                result = w.ask(pred, gold, deadline, grade)
            except (EOFError, OSError, ValueError):
                self._replace(w)  # the worker died (e.g. killed by the OS): retry on a fresh one
                if time.monotonic() >= deadline:
                    return TIMEOUT
                continue
            if result is not None:
                self._idle.put(w)
                return result
            self.kills += 1
            self._replace(w)
            return TIMEOUT

    def _replace(self, w: _Worker) -> None:
        self._retire(w)
        self._spawn()

    def warm(self, timeout: float = STARTUP_S) -> bool:
        """Wait until every idle worker has started; True if all are ready."""
        deadline = time.monotonic() + timeout
        taken = []
        while True:
            try:
                taken.append(self._idle.get_nowait())
            except queue.Empty:
                break
        ok = True
        for w in taken:
            try:
                ok = w.wait_ready(deadline) and ok
            except (EOFError, OSError, ValueError):
                ok = False
            self._idle.put(w)
        return ok

    def close(self) -> None:
        with self._lock:
            workers, self._all = self._all, []
        for w in workers:
            w.kill()


_POOL: SymbolicPool | None = None
_POOL_LOCK = threading.Lock()


@atexit.register
def _close_pool() -> None:
    if _POOL is not None and _POOL._owner_pid == os.getpid():
        _POOL.close()


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


if __name__ == "__main__":
    _worker_main(int(sys.argv[1]) if len(sys.argv) > 1 else 2048)
