"""Sandbox speed vs a naive `subprocess.run([python, "-c", code])`, measured in the same run:
per-job latency (median, p99) and jobs/s with 2 workers for every available backend, printed
as ratios. The measuring code lives in `sandbox/bench.py` (also `python -m sandbox bench`).

    python benchmarks/bench_sandbox.py [--jobs 200] [--backends bwrap,process]
"""

import sys

from sandbox.bench import main

if __name__ == "__main__":
    sys.exit(main())
