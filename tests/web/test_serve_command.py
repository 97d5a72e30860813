"""`moeplan serve` as a command: listens on 127.0.0.1 by default, prints its address, answers; a bad port or
an address in use is one line and exit code 2; `moeplan --help` does not import the web stack."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request

from .conftest import need


def test_serve_prints_its_address_and_answers() -> None:
    need("starlette")
    need("uvicorn")
    proc = subprocess.Popen([sys.executable, "-m", "moeplan", "serve", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("moeplan serve: http://127.0.0.1:"), line
        url = line.split()[2]
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy for localhost
        with opener.open(url.replace("/plan", "/plan?model=qwen3-30b-a3b&gpus=16&seq_len=4k&gbs=64"),
                                    timeout=60) as r:
            assert r.status == 200 and b'id="plan-table"' in r.read()
        # nothing but localhost: the port is not open on the machine's other addresses
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        others = {a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)} - {"127.0.0.1"}
        for addr in others:
            if addr.startswith("127."):
                continue
            with socket.socket() as s:
                s.settimeout(1)
                assert s.connect_ex((addr, port)) != 0
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_serve_bad_arguments_are_one_line() -> None:
    r = subprocess.run([sys.executable, "-m", "moeplan", "serve", "--port", "70000"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "outside 0-65535" in r.stderr
    need("uvicorn")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "moeplan", "serve", "--port", str(port)], capture_output=True,
                           text=True, timeout=60, env={**os.environ})
    assert r.returncode == 2 and r.stderr.startswith("moeplan: error: cannot listen on 127.0.0.1:") and \
        r.stderr.count("\n") == 1, r.stderr


def test_help_does_not_import_the_web_stack() -> None:
    code = ("import contextlib, io, json, sys\nfrom moeplan.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n    try:\n        main(['--help'])\n"
            "    except SystemExit:\n        pass\n"
            "sys.__stdout__.write(json.dumps(sorted(sys.modules)))\n")
    loaded = set(json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                           check=True).stdout))
    assert "moeplan.cli.serve" in loaded
    assert not loaded & {"starlette", "uvicorn", "jinja2", "moeplan.web.app", "multipart", "python_multipart"}
