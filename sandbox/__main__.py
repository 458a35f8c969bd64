"""Sandbox CLI: `python -m sandbox run FILE.py | doctor | bench | build-image`.

    python -m sandbox run prog.py --stdin input.txt --timeout 2   # exit code = the program's
    python -m sandbox doctor        # which backends work here, why not the others, what each isolates
    python -m sandbox bench         # latency and jobs/s vs naive subprocess
    python -m sandbox build-image   # docker image from the host's Python, no registry needed
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys

from . import Sandbox, SandboxUnavailable, available_backends
from .backends import ALLOW_PROCESS_ENV, BACKENDS, IMAGE, resolve
from .cgroups import SlotCgroup


def cmd_run(args) -> int:
    with open(args.file, encoding="utf-8") as f:
        code = f.read()
    stdin = ""
    if args.stdin:
        with open(args.stdin, encoding="utf-8") as f:
            stdin = f.read()
    with Sandbox(args.backend, workers=1, memory_mb=args.memory) as sb:
        r = sb.run(code, timeout_s=args.timeout, max_output_bytes=args.max_output, stdin=stdin)
    if args.json:
        print(json.dumps(r.to_dict(), ensure_ascii=False, indent=2))
    else:
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        flags = [n for n in ("timed_out", "oom", "output_truncated") if getattr(r, n)]
        print(f"[sandbox {r.backend}: exit {r.exit_code}, {r.duration_ms:.1f} ms"
              + (", " + ", ".join(flags) if flags else "") + "]", file=sys.stderr)
    return r.exit_code if r.exit_code >= 0 else 128 - r.exit_code


def cmd_doctor(args) -> int:
    for name, (ok, why) in available_backends().items():
        print(f"{name:8} {'yes' if ok else 'no ':3}  {why}")
        print(f"{'':8} isolates: {BACKENDS[name].isolation}")
    bwrap = shutil.which("bwrap")
    if bwrap:
        v = subprocess.run([bwrap, "--version"], capture_output=True, text=True).stdout.strip()
        print(f"bwrap: {bwrap} ({v})")
    cg = SlotCgroup.create("mathrl-doctor-" + secrets.token_hex(4), 64, 16)
    if cg is None:
        print("cgroups: cannot create one here; bwrap/process cap memory per process only")
    else:
        print(f"cgroups: {cg.label} for bwrap/process slots (docker: the engine's)")
        cg.destroy()
    try:
        print(f"auto -> {resolve('auto').name}")
    except SandboxUnavailable as e:
        print(f"auto -> none: {e}")
        return 1
    print(f"({ALLOW_PROCESS_ENV}={os.environ.get(ALLOW_PROCESS_ENV, '')!r})")
    return 0


def cmd_bench(args) -> int:
    from .bench import main

    return main(args.rest)


def cmd_build_image(args) -> int:
    from .image import build

    print(build(args.source, args.tag))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sandbox", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run FILE.py in the sandbox")
    r.add_argument("file")
    r.add_argument("--backend", default="auto", choices=["auto", *BACKENDS])
    r.add_argument("--timeout", type=float, default=5.0)
    r.add_argument("--memory", type=int, default=512, help="MB")
    r.add_argument("--max-output", type=int, default=65536, help="bytes per stream")
    r.add_argument("--stdin", help="file fed to the program's stdin")
    r.add_argument("--json", action="store_true", help="print the whole ExecResult as JSON")
    r.set_defaults(fn=cmd_run)
    sub.add_parser("doctor", help="which backends work here").set_defaults(fn=cmd_doctor)
    b = sub.add_parser("bench", help="latency and throughput vs naive subprocess",
                       add_help=False)  # its own options: see `python -m sandbox bench -h`
    b.set_defaults(fn=cmd_bench)
    i = sub.add_parser("build-image", help=f"build {IMAGE} for the docker backend")
    i.add_argument("--source", choices=["host", "registry"], default="host")
    i.add_argument("--tag", default=IMAGE)
    i.set_defaults(fn=cmd_build_image)
    args, rest = ap.parse_known_args(argv)
    if args.cmd != "bench" and rest:
        ap.error(f"unrecognized arguments: {' '.join(rest)}")
    args.rest = rest
    try:
        return args.fn(args)
    except SandboxUnavailable as e:
        print(f"sandbox: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
