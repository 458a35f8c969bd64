"""Nothing a loopback `mathrl vllm-serve` opens is reachable from another network namespace.

The test creates a network namespace joined to this one by a veth pair (10.213.x.1 here,
10.213.x.2 there, with a default route through this side, so the namespace can address every
IPv4 address of this host), checks that the namespace does reach this side (a socket on
0.0.0.0, and torch's ``TCPStore``, the weight group's old store, which listens on every
interface whatever host it is given), then starts the server on 127.0.0.1 (stand-in engine),
forms a weight group with a trainer and opens a second one, and tries every TCP port this
process started listening on, at every non-loopback IPv4 address of this host, from inside the
namespace: none may answer. Needs root and iproute2 (``ip netns``); skipped with the reason
where namespaces cannot be created.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from datetime import timedelta

import pytest
import torch.distributed as dist

from pipeline.rollout.server_auth import TOKEN_ENV
from pipeline.rollout.vllm_client import VLLMServerEngine
from tests.serve_helpers import TOKEN, call, running_server, serve_config, toy_model

PROBE = """
import json, socket, sys
hosts, ports = json.loads(sys.argv[1]), json.loads(sys.argv[2])
out = {}
for host in hosts:
    for port in ports:
        try:
            socket.create_connection((host, port), timeout=1).close()
            out[f"{host}:{port}"] = True
        except OSError:
            out[f"{host}:{port}"] = False
print(json.dumps(out))
"""


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture()
def netns():
    if os.geteuid() != 0:
        pytest.skip("creating a network namespace needs root")
    if shutil.which("ip") is None:
        pytest.skip("needs iproute2's `ip` (apt-get install iproute2)")
    tag = os.getpid() % 100_000
    ns, here, there, octet = f"mathrl{tag}", f"mrl{tag}h", f"mrl{tag}n", tag % 250
    made = _ip("netns", "add", ns)
    if made.returncode:
        pytest.skip(f"network namespaces unavailable here: {made.stderr.strip()}")
    try:
        for args in (["link", "add", here, "type", "veth", "peer", "name", there], ["link", "set", there, "netns", ns],
                     ["addr", "add", f"10.213.{octet}.1/30", "dev", here], ["link", "set", here, "up"],
                     ["-n", ns, "addr", "add", f"10.213.{octet}.2/30", "dev", there],
                     ["-n", ns, "link", "set", there, "up"], ["-n", ns, "link", "set", "lo", "up"],
                     ["-n", ns, "route", "add", "default", "via", f"10.213.{octet}.1"]):
            done = _ip(*args)
            assert done.returncode == 0, f"ip {' '.join(args)}: {done.stderr}"
        yield ns, f"10.213.{octet}.1"
    finally:
        _ip("netns", "del", ns)
        _ip("link", "del", here)  # gone with the namespace already, normally


def _host_addresses() -> list[str]:
    """This host's IPv4 addresses outside loopback (the veth end included)."""
    lines = _ip("-o", "-4", "addr", "show").stdout.splitlines()
    addresses = [line.split()[3].split("/")[0] for line in lines]
    return [a for a in addresses if not a.startswith("127.")]


def _reachable(ns: str, hosts: list[str], ports) -> dict[str, bool]:
    """Which "host:port" of ``hosts`` x ``ports`` accept a TCP connection from inside ``ns``."""
    done = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", PROBE, json.dumps(hosts),
                           json.dumps(sorted(ports))], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _listening_ports() -> set[int]:
    """TCP ports this process listens on (its socket inodes in /proc/net/tcp{,6})."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.read().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_the_namespace_reaches_listeners_on_every_interface(netns):
    """The check can see exposure: a socket on 0.0.0.0 and a TCPStore "on 127.0.0.1" are reachable."""
    ns, host = netns
    with socket.socket() as everywhere:
        everywhere.bind(("0.0.0.0", 0))
        everywhere.listen()
        store = dist.TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=5), wait_for_workers=False)
        hosts = _host_addresses()
        assert host in hosts
        reach = _reachable(ns, hosts, [everywhere.getsockname()[1], store.port])
        assert all(reach.values()) and len(reach) == 2 * len(hosts), reach


def test_no_listener_of_a_loopback_server_is_reachable_from_the_namespace(netns, monkeypatch):
    ns, host = netns
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    before = _listening_ports()
    with running_server(serve_config()) as (server, url):
        port = int(url.rsplit(":", 1)[1])
        trainer = VLLMServerEngine(serve_config(f"rollout.server_port={port}"), toy_model())
        trainer.sync_weights(toy_model())  # a formed weight group: gloo's listeners on both sides
        assert server.group is not None
        assert call(url, "POST", "/init_weight_group", {"backend": "gloo"})[0] == 200  # and one forming
        opened = _listening_ports() - before
        hosts = _host_addresses()
        reach = _reachable(ns, hosts, opened)
        trainer.close()
    assert port in opened and len(opened) >= 2, opened  # the HTTP API and gloo's listener(s)
    assert host in hosts and len(reach) == len(hosts) * len(opened)
    assert not any(reach.values()), reach
