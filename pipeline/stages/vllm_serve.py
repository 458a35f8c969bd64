"""`mathrl vllm-serve` / `make vllm-serve`: a separate process that samples rollouts for
`rollout.engine=vllm_server` (the server itself, its API and its threads: ``pipeline/rollout/vllm_server.py``).

Reads the token (``rollout.server_token_file`` or MATHRL_SERVER_TOKEN; refuses to start without one
unless ``rollout.server_allow_no_token`` on loopback), listens, loads the config's model into a
colocated vLLM engine (with the sandbox runner of ``rollout.tools``, if on) and serves until SIGTERM /
SIGINT.
"""

from __future__ import annotations

import os
import sys

from pipeline.config import RunConfig
from pipeline.rollout.server_auth import HOW, TokenError, server_token
from pipeline.rollout.vllm_server import build_server, listen, log


def main(cfg: RunConfig) -> int:
    from pipeline.config.checks import is_loopback
    from pipeline.rollout.factory import colocated_vllm, tool_settings

    r = cfg.rollout
    try:
        token = server_token(r)
    except TokenError as e:
        print(f"mathrl vllm-serve: {e}", file=sys.stderr)
        return 2
    if token is None and not r.server_allow_no_token:
        print(f"mathrl vllm-serve: no token: {HOW}; or, for a loopback-only server that every local user may "
              "drive, rollout.server_allow_no_token=true", file=sys.stderr)
        return 2
    # NCCL weight group: on a timed-out or broken broadcast abort the communicator but keep this
    # process serving (torch's default, 3, ends the process). Read when the group is created.
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2")
    try:
        sock = listen(r.server_host, r.server_port)
    except OSError as e:
        print(f"mathrl vllm-serve: cannot listen on {r.server_host}:{r.server_port} ({e}); "
              "pick another rollout.server_port", file=sys.stderr)
        return 1
    if token is None:
        log("running WITHOUT a token (rollout.server_allow_no_token): every local user can drive this server")
    elif not is_loopback(r.server_host):
        log("listening beyond loopback: the token travels in clear text; keep the network private (docs/vllm_serve.md)")
    log(f"loading {cfg.model.name_or_path} ({cfg.model.dtype}) into vLLM")
    tools = tool_settings(cfg)
    engine = colocated_vllm(cfg, cfg.model.name_or_path, sleep_mode=False, tools=tools)
    if tools is not None:
        log(f"rollout.tools: requests that ask run the policy's code in this machine's sandbox ({tools})")
    server, httpd = build_server(cfg, engine, token)
    log(f"serving {cfg.model.name_or_path} at http://{r.server_host}:{r.server_port} (pid {os.getpid()})")
    try:
        httpd.run(sockets=[sock])
    finally:
        sock.close()
        server.close()
        engine.close()
    log("stopped")
    return 0
