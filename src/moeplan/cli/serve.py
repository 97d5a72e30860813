"""``moeplan serve``: the parser and handler of the CLI command that runs the planning page (moeplan.web.app).

Kept apart from moeplan.cli so that ``moeplan --help`` imports neither Starlette nor uvicorn: the parser
is plain argparse, the web stack is imported when the command runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from typing import Any

from moeplan.base.errors import MoeplanError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
INSTALL_HINT = "moeplan serve needs the serve extra: pip install 'moeplan[serve]'"


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: '{text}'") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is outside 0-65535")
    return port


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``serve`` to the CLI's subparsers."""
    p = sub.add_parser(
        "serve", help="a planning page in the browser (plan, sweep, check, explain)",
        description="Run a local web page over moeplan's API: plan (the ranked plans, memory, step time, the "
        "iteration's timeline, exports), sweep, check and explain. Every field change updates the answer; the URL "
        "holds the question (/plan?model=deepseek-v3&gpu=h100&gpus=1024&seq_len=128k&gbs=1024). Listens on "
        f"{DEFAULT_HOST} unless --host says otherwise. Needs the serve extra: pip install 'moeplan[serve]'.",
        epilog="examples:\n  moeplan serve\n  moeplan serve --port 8080",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default=DEFAULT_HOST,
                   help=f"address to listen on (default {DEFAULT_HOST}: this machine only; 0.0.0.0 opens it to the "
                   "network)")
    p.add_argument("--port", type=_port, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks a free one)")
    p.set_defaults(handler=run)
    return p


def require_serve() -> None:
    """A MoeplanError (one line, exit code 2) where the serve extra is not installed."""
    missing = [m for m in ("starlette", "uvicorn", "jinja2", "multipart") if importlib.util.find_spec(m) is None]
    if missing:
        raise MoeplanError(f"{INSTALL_HINT} (missing: {', '.join(missing)})")


def run(args: argparse.Namespace, console: Any = None) -> int:
    require_serve()
    import socket

    import uvicorn

    from moeplan.web.app import create_app

    sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
        sock.listen(2048)  # listening before the address is printed: a client may connect at once
    except OSError as exc:
        sock.close()
        raise MoeplanError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    exposed = "" if host in ("127.0.0.1", "::1") or host.startswith("127.") else (
        "; reachable from the network, with no login")
    sys.stdout.write(f"moeplan serve: http://{shown}:{port}/plan (Ctrl-C stops it{exposed})\n")
    sys.stdout.flush()
    config = uvicorn.Config(create_app(), log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    server.run(sockets=[sock])
    return 0
