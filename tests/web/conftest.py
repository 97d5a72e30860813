"""Fixtures of the `moeplan serve` tests: the app under Starlette's test client, and a live server.

The web stack is the optional serve extra: without it these tests skip, except under MOEPLAN_STRICT=1
(what .ci/run sets), where a missing package is a failure, as for Megatron-Core and Chromium."""

from __future__ import annotations

import importlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

STRICT = os.environ.get("MOEPLAN_STRICT") == "1"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "serve"


def need(module: str) -> Any:
    """``module``, imported; a skip where it is missing (a failure under MOEPLAN_STRICT=1)."""
    if STRICT:
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"moeplan serve's tests need {module} (pip install 'moeplan[serve,serve-test]')")


@pytest.fixture(scope="session")
def upload_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("uploads")


@pytest.fixture(scope="session")
def client(upload_dir: Path) -> Iterator[Any]:
    need("starlette")
    need("httpx")
    need("multipart")
    from starlette.testclient import TestClient

    from moeplan.web.app import create_app

    with TestClient(create_app(upload_dir), raise_server_exceptions=False) as c:
        yield c


@pytest.fixture(scope="session")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """uvicorn serving the app on 127.0.0.1 and a free port, in a thread; its base URL."""
    need("starlette")
    uvicorn = need("uvicorn")
    need("multipart")
    from moeplan.web.app import create_app

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(tmp_path_factory.mktemp("live-uploads")), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()
