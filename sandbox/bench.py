"""Sandbox speed (used by `python -m sandbox bench` and benchmarks/bench_sandbox.py): per-job
latency (median, p99) and jobs/s with 2 workers for every backend available here, against a
naive `subprocess.run([python, "-c", code])` measured in the same run.

Prints ratios (naive / backend: > 1 means the backend is faster). Targets from issue 4 for the
default backend: median <= 15 ms per `print(1+1)` and >= 80 jobs/s with 2 workers (with the
per-job slot check of issue 16 on). Then, per backend, what a job that leaves state behind
costs (a chmod-000 dir with a file, a SysV message queue, a daemon: the sweep after it) and
what replacing a unit costs (the fallback when a slot cannot be cleared).

    python -m sandbox bench [--jobs 200] [--backends bwrap,process]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from . import Sandbox, available_backends
from .backends import BACKENDS, BASE_PYTHON, resolve

CODE = "print(1+1)"
DIRTY = ("import ctypes, os, time\nos.makedirs('L/x')\nopen('L/x/f', 'w').write('x')\n"
         "os.chmod('L/x', 0)\nos.chmod('L', 0)\n{ipc}"
         "if os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\nprint(1+1)")
QUEUE = "ctypes.CDLL(None).msgget(0, 0o1600)\n"


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def naive_once() -> float:
    t = time.perf_counter()
    subprocess.run([BASE_PYTHON, "-c", CODE], capture_output=True, timeout=30, check=True)
    return (time.perf_counter() - t) * 1000


def measure_naive(jobs: int) -> dict:
    lat = [naive_once() for _ in range(jobs)]
    t = time.perf_counter()
    with ThreadPoolExecutor(2) as ex:
        list(ex.map(lambda _: naive_once(), range(jobs)))
    return {"median": statistics.median(lat), "p99": _pct(lat, 0.99),
            "jobs_s": jobs / (time.perf_counter() - t)}


def measure_backend(name: str, jobs: int) -> dict:
    with Sandbox(name, workers=2) as sb:
        sb.warm()
        lat = []
        for _ in range(jobs):
            t = time.perf_counter()
            r = sb.run(CODE)
            lat.append((time.perf_counter() - t) * 1000)
            assert r.stdout == "2\n", r
        t = time.perf_counter()
        rs = sb.map([CODE] * jobs, progress=False)
        rate = jobs / (time.perf_counter() - t)
        assert all(r.stdout == "2\n" for r in rs)
    return {"median": statistics.median(lat), "p99": _pct(lat, 0.99), "jobs_s": rate}


def measure_leftovers(name: str, jobs: int) -> tuple[float, float]:
    """(median ms of a job that leaves state behind, median ms to replace a unit)."""
    # no queue where jobs are root in the host's IPC namespace: nothing would remove it
    root_jobs = name == "process" and not BACKENDS["process"].drops_uid
    code = DIRTY.format(ipc="" if root_jobs else QUEUE)
    with Sandbox(name, workers=1) as sb:
        lat = []
        for _ in range(jobs):
            t = time.perf_counter()
            r = sb.run(code)
            lat.append((time.perf_counter() - t) * 1000)
            assert r.stdout == "2\n" and sb.run("import os\nprint(os.listdir('.'))").stdout == "[]\n"
        slot, restart = sb._slots[0], []
        for _ in range(5):
            t = time.perf_counter()
            slot.close()
            slot.start()
            restart.append((time.perf_counter() - t) * 1000)
    return statistics.median(lat), statistics.median(restart)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sandbox bench",
                                 description="per-job latency and jobs/s vs naive subprocess")
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--backends", default="", help="comma list; default: all available")
    args = ap.parse_args(argv)
    avail = available_backends()
    names = args.backends.split(",") if args.backends else [n for n, (ok, _) in avail.items() if ok]
    for n, (ok, why) in avail.items():
        if not ok:
            print(f"# {n}: not measured ({why})")
    naive = measure_naive(args.jobs)
    rows = [("naive subprocess", naive)]
    rows += [(n, measure_backend(n, args.jobs)) for n in names]
    print(f"{'backend':<18}{'median ms':>10}{'p99 ms':>9}{'jobs/s (2w)':>13}"
          f"{'latency x':>11}{'throughput x':>14}")
    for n, m in rows:
        print(f"{n:<18}{m['median']:>10.1f}{m['p99']:>9.1f}{m['jobs_s']:>13.1f}"
              f"{naive['median'] / m['median']:>11.2f}{m['jobs_s'] / naive['jobs_s']:>14.2f}")
    try:
        default = resolve("auto").name
    except Exception:
        default = None
    print(f"\n{'backend':<18}{'job leaving state ms':>22}{'unit replacement ms':>21}")
    for n in names:
        dirty, restart = measure_leftovers(n, max(10, args.jobs // 10))
        print(f"{n:<18}{dirty:>22.1f}{restart:>21.1f}")
    res = dict(rows)
    if default in res:
        m = res[default]
        ok = m["median"] <= 15 and m["jobs_s"] >= 80
        print(f"default backend ({default}): median {m['median']:.1f} ms (target <= 15), "
              f"{m['jobs_s']:.0f} jobs/s (target >= 80): {'PASS' if ok else 'MISS'}")
    return 0

