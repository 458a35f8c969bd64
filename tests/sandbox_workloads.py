"""What honest jobs do: stdlib-only programs of the kind a math model writes, each with the
output it must print. They measure the seccomp allowlist (`benchmarks/seccomp_survey.py`
traces them) and keep it honest (`tests/test_sandbox_seccomp.py` runs them under it): a
syscall the list misses shows up here as a failed job, not in a training run.
"""

from __future__ import annotations

# name -> (code, expected stdout)
WORKLOADS: dict[str, tuple[str, str]] = {
    "arith": ("print(sum(i * i for i in range(1000)))", "332833500\n"),
    "fractions_decimal": (
        "from fractions import Fraction\nfrom decimal import Decimal, getcontext\n"
        "getcontext().prec = 30\nprint(Fraction(1, 3) + Fraction(1, 6), Decimal(1) / Decimal(7))",
        "1/2 0.142857142857142857142857142857\n"),
    "math_stats": (
        "import math, statistics, cmath\n"
        "print(math.comb(10, 3), statistics.median([3, 1, 2]), abs(cmath.exp(1j * math.pi) + 1) < 1e-12)",
        "120 2 True\n"),
    "itertools_heapq_bisect": (
        "import itertools, heapq, bisect, collections, functools, operator\n"
        "c = collections.Counter(x % 3 for x in range(10))\n"
        "print(len(list(itertools.permutations(range(5)))), heapq.nsmallest(2, [5, 1, 4]), "
        "bisect.bisect([1, 3, 5], 4), c[0], functools.reduce(operator.mul, range(1, 6)))",
        "120 [1, 4] 2 4 120\n"),
    "deep_recursion": (
        "import sys, functools\nsys.setrecursionlimit(20000)\n"
        "@functools.lru_cache(None)\ndef f(n):\n    return 0 if n == 0 else 1 + f(n - 1)\nprint(f(9000))",
        "9000\n"),
    "big_alloc": ("x = bytearray(200 * 1024 * 1024)\nx[-1] = 1\nprint(len(x), sum(x[-10:]))",
                  "209715200 1\n"),
    "stdin_input": ("n = int(input())\nimport sys\nprint(n + sum(map(int, sys.stdin.read().split())))",
                    "10\n"),
    "files_in_scratch": (
        "import os, tempfile, shutil, glob, pathlib, json\n"
        "pathlib.Path('d').mkdir()\nopen('d/a.json', 'w').write(json.dumps([1, 2]))\n"
        "shutil.copy('d/a.json', 'd/b.json')\nos.rename('d/b.json', 'd/c.json')\n"
        "with tempfile.TemporaryDirectory(dir='.') as t:\n    open(os.path.join(t, 'x'), 'w').close()\n"
        "os.chmod('d/c.json', 0o600)\nos.symlink('a.json', 'd/l')\nos.utime('d/a.json')\n"
        "print(sorted(glob.glob('d/*')), json.load(open('d/c.json')), os.path.getsize('d/a.json'), "
        "os.readlink('d/l'), os.access('d/c.json', os.R_OK))\nshutil.rmtree('d')\nprint(os.listdir('.'))",
        "['d/a.json', 'd/c.json', 'd/l'] [1, 2] 6 a.json True\n[]\n"),
    "time_and_random": (
        "import time, random, secrets, os, uuid, datetime\nt = time.time(); p = time.perf_counter()\n"
        "time.sleep(0.01); c = time.process_time(); m = time.monotonic()\n"
        "print(time.perf_counter() - p >= 0.01, len(os.urandom(8)), len(secrets.token_hex(4)), "
        "random.Random(1).randint(1, 6), len(str(uuid.uuid4())), datetime.date(2024, 1, 1).isoweekday())",
        "True 8 8 2 36 1\n"),
    "threads": (
        "import threading, queue, concurrent.futures as cf\nq = queue.Queue()\n"
        "ts = [threading.Thread(target=q.put, args=(i,)) for i in range(4)]\n[t.start() for t in ts]\n"
        "[t.join() for t in ts]\nwith cf.ThreadPoolExecutor(3) as ex:\n"
        "    s = sum(ex.map(lambda x: x * x, range(10)))\nprint(sorted(q.queue), s)",
        "[0, 1, 2, 3] 285\n"),
    "asyncio": (
        "import asyncio\nasync def f(x):\n    await asyncio.sleep(0.001)\n    return x + 1\n"
        "async def main():\n    return await asyncio.gather(*(f(i) for i in range(3)))\nprint(asyncio.run(main()))",
        "[1, 2, 3]\n"),
    "subprocess": (
        "import subprocess, sys\n"
        "print(subprocess.run([sys.executable, '-c', 'print(6*7)'], capture_output=True, text=True).stdout, end='')",
        "42\n"),
    "fork_and_pipe": (
        "import os\nr, w = os.pipe()\npid = os.fork()\n"
        "if pid == 0:\n    os.write(w, b'x')\n    os._exit(0)\nos.waitpid(pid, 0)\nprint(os.read(r, 1))",
        "b'x'\n"),
    "hash_zlib_pickle_struct": (
        "import hashlib, zlib, pickle, struct, base64, copy, array\n"
        "print(hashlib.sha256(b'a').hexdigest()[:8], zlib.crc32(b'a'), pickle.loads(pickle.dumps({1: 2})), "
        "struct.unpack('<I', b'\\x01\\0\\0\\0')[0], base64.b64encode(b'a'), array.array('i', [1])[0])",
        "ca978112 3904355907 {1: 2} 1 b'YQ==' 1\n"),
    "ctypes_mmap": (
        "import ctypes, mmap\nlibc = ctypes.CDLL(None)\nm = mmap.mmap(-1, 4096)\nm[:2] = b'hi'\n"
        "print(libc.abs(-3), m[:2], ctypes.sizeof(ctypes.c_long))",
        "3 b'hi' 8\n"),
    "sqlite_memory": (
        "import sqlite3\nc = sqlite3.connect(':memory:')\nc.execute('create table t(x)')\n"
        "c.executemany('insert into t values (?)', [(i,) for i in range(5)])\n"
        "print(c.execute('select sum(x) from t').fetchone()[0])",
        "10\n"),
    "introspection": (
        "import os, sys, platform, resource, getpass, locale, signal, gc, faulthandler\n"
        "faulthandler.enable()\nsignal.signal(signal.SIGALRM, lambda *a: None); signal.alarm(0)\n"
        "print(os.getcwd() != '', platform.system(), resource.getrlimit(resource.RLIMIT_CPU)[0] > 0, "
        "os.cpu_count() > 0, len(os.times()), gc.collect() >= 0, isinstance(os.getpid(), int), "
        "os.getuid() >= 0, sys.getrecursionlimit() > 0, len(os.sched_getaffinity(0)) > 0)",
        "True Linux True True 5 True True True True True\n"),
    "timeit_profile": (
        "import timeit, cProfile, pstats, io, tracemalloc\ntracemalloc.start()\n"
        "t = timeit.timeit('1+1', number=1000)\ncProfile.run('sum(range(100))', 'prof')\n"
        "pstats.Stats('prof', stream=io.StringIO())\nprint(t >= 0, tracemalloc.get_traced_memory()[0] > 0)",
        "True True\n"),
    "stdlib_imports": (
        "import socket, ssl, select, selectors, signal, email, http.client, urllib.parse, xml.dom.minidom, csv, "
        "textwrap, string, unicodedata, difflib, enum, dataclasses, typing, abc, contextlib, numbers, "
        "inspect, ast, dis, tokenize, logging, argparse, shlex, pprint, weakref, heapq, graphlib, zoneinfo, "
        "calendar, gzip, bz2, lzma, zipfile, tarfile, io, codecs, doctest, unittest, multiprocessing\n"
        "a, b = socket.socketpair()\na.sendall(b'ok')\nprint(b.recv(2).decode(), calendar.isleap(2024))",
        "ok True\n"),
    "exceptions_and_exit": (
        "import sys\ntry:\n    1 / 0\nexcept ZeroDivisionError as e:\n    print(type(e).__name__)\n"
        "sys.stdout.flush()\nsys.exit(0)",
        "ZeroDivisionError\n"),
}

STDIN = {"stdin_input": "3\n3 4\n"}
