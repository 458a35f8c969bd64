"""Wire format between the host (`pool.py`) and the worker, and the buffers that hold a job's
bytes in the worker. Standard library only: shipped into every wall next to `worker.py`.

A frame is a 4-byte big-endian length, then UTF-8 JSON. A request is a header frame (limits
and `size`) followed by `size` raw bytes of payload (JSON with the code and stdin); a response
is a header frame (exit status, flags, `sizes`) followed by the raw stdout and stderr bytes.
The worker's first frame is {"ready": true, ...}. Raw bytes after a header keep job data out
of the worker's JSON objects, so it can live only in `Buf`s that are zeroed after use.
"""

import json
import os
import struct


def read_frame(fd):
    head = read_exact(fd, 4)
    if head is None:
        return None
    body = read_exact(fd, struct.unpack(">I", head)[0])
    return None if body is None else json.loads(body)


def encode_frame(obj):
    data = json.dumps(obj).encode()
    return struct.pack(">I", len(data)) + data


def write_frame(fd, obj, *raw):
    """One frame, then the raw buffers after it, in as few syscalls as the pipe allows."""
    views = [memoryview(encode_frame(obj)), *raw]
    while views:
        done = os.writev(fd, views)
        while views and done >= len(views[0]):
            done -= len(views.pop(0))
        if views:
            views[0] = views[0][done:]


def read_exact(fd, n):
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


class Buf:
    """Bytes of one job (payload or an output stream) in a buffer that is zeroed before it
    is dropped, so the next job, a fork of this worker, cannot find them in its memory."""

    def __init__(self, size, cap=None):
        self.cap = size if cap is None else cap  # keep at most cap + 1 bytes (to see a breach)
        self.data = bytearray(min(size, self.cap + 1))
        self.n = 0

    def fill(self, fd):
        """Read what `fd` has into the buffer; False at end of file or once full."""
        if self.n == len(self.data):
            if self.n > self.cap:
                return False
            bigger = bytearray(min(2 * len(self.data) or 1, self.cap + 1))
            bigger[:self.n] = self.data
            self.scrub()
            self.data = bigger
        with memoryview(self.data) as view:
            try:
                got = os.readv(fd, [view[self.n:]])
            except BlockingIOError:
                return True
        self.n += got
        return got > 0

    def fill_exact(self, fd):
        while self.n < len(self.data):
            if not self.fill(fd):
                return False
        return True

    def view(self):
        return memoryview(self.data)[:min(self.n, self.cap)]

    def scrub(self):
        self.data[:] = bytes(len(self.data))
