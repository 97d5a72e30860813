"""200 hostile requests to `moeplan serve`: oversized uploads, binary files, path-like names, unicode, huge
numbers, malformed bodies. None is answered 5xx, none raises inside the app (the catch-all would log it), no
file is written outside the upload directory (and there only the hash-named uploads), and the server still
answers a plan afterwards."""

from __future__ import annotations

import logging
import random
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import need

MARKER = "moeplan-hostile-7f3a"
MIB = 1 << 20
GOOD = "model=qwen3-30b-a3b&gpu=h100&gpus=16&seq_len=4k&gbs=64"

PATHS = [f"../../{MARKER}.json", f"/tmp/{MARKER}.yaml", f"..\\..\\{MARKER}.json", f"C:\\{MARKER}.json",
         f"%2e%2e%2f{MARKER}", f"upload:../../{MARKER}", f"upload:{'a' * 16}/../x", "/etc/passwd", "~/.ssh/id_rsa",
         "\x00evil", f"{MARKER}\n.json", "config.json", "."]
UNICODE = ["模型", "ｄｅｅｐｓｅｅｋ-v3", "ℌ100", "１２８k", "١٢٨", "deepseek\u202ev3", "💥", "\ud800" * 0 + "é" * 300,
           "\u0000", "Ω" * 50]
NUMBERS = ["0", "-1", "1e308", "1e308k", "9" * 250, str(10**40), str(2**63), "nan", "inf", "-0", "1.5", "0x10",
           "1_000", "1,024", " 64 ", "1" * 4400, "128K", "1m", "3e-9k"]
FIELDS = ["model", "gpu", "gpus", "seq_len", "gbs", "gbs_tokens", "tp", "pp", "vpp", "cp", "ep", "etp", "recompute",
          "dispatcher", "precision", "mcore_version", "top", "plan", "hardware"]


def _value(rng: random.Random) -> str:
    return rng.choice([*PATHS, *UNICODE, *NUMBERS])


def _requests(rng: random.Random) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(method, url, httpx keyword arguments) of 200 hostile requests."""
    binary = bytes(rng.getrandbits(8) for _ in range(4096))
    big = b"x" * (MIB + 1)
    views = ["/plan", "/sweep", "/explain", "/plan/figure/timeline", "/plan/figure/plans", "/plan/download/trace",
             "/plan/download/overrides"]
    fixed: list[tuple[str, str, dict[str, Any]]] = [
        ("POST", "/upload/model", {"files": {"file": ("config.json", big, "application/json")}}),
        ("POST", "/upload/hardware", {"files": {"file": ("hw.yaml", big)}}),
        ("POST", "/check", {"files": {"file": ("run.yaml", big)}}),
        ("POST", "/check", {"data": {"text": "a" * (MIB + 10)}}),
        ("POST", "/explain", {"data": {"a_text": "a" * (MIB + 10), "b_text": "b"}}),
        ("POST", "/check", {"content": (b"x" * 65536 for _ in range(20)),
                            "headers": {"content-type": "multipart/form-data; boundary=zz"}}),  # chunked, no length
        ("POST", "/check", {"content": b"--zz\r\nnot a part", "headers": {"content-type": "multipart/form-data; boundary=zz"}}),
        ("POST", "/check", {"content": b"garbage", "headers": {"content-type": "multipart/form-data"}}),
        ("POST", "/check", {"content": b"\xff\xfe" * 100, "headers": {"content-type": "application/x-www-form-urlencoded"}}),
        ("POST", "/check", {"content": b"{}", "headers": {"content-type": "application/json"}}),
        ("POST", "/check", {"content": b"x", "headers": {"content-length": "99999999999"}}),
        ("POST", "/check", {"content": b"x", "headers": {"content-length": "-5"}}),
        ("POST", "/explain", {"files": {"a_text": ("a", b"x")}}),
        ("POST", "/upload/model", {"data": {"file": "not a file"}}),
        ("POST", "/upload/model", {"files": {"other": ("x.json", b"{}")}}),
        ("POST", "/upload/model", {"files": {"file": ("empty.json", b"")}}),
        ("GET", "/plan?" + "&".join(f"tp={i}" for i in range(500)), {}),
        ("GET", "/plan?" + "x" * 60000, {}),
        ("GET", "/static/..%2f..%2fapp.py", {}),
        ("PUT", "/plan", {}),
        ("DELETE", "/check", {}),
        ("GET", "/plan/download/" + MARKER, {}),
    ]
    yield from fixed
    n = 0
    while n < 200 - len(fixed):
        n += 1
        kind = rng.randrange(6)
        if kind == 0:  # binary and path-named uploads
            target = rng.choice(["/upload/model", "/upload/hardware", "/check"])
            name = rng.choice(PATHS + UNICODE[:3])
            body = rng.choice([binary, binary[:7], b"\x00" * 1000, "ünïcødé: [".encode(), b'{"model_type": 1}'])
            yield "POST", target, {"files": {"file": (name, body, rng.choice(["application/octet-stream", "text/plain"]))}}
        elif kind == 1:  # pasted run files with odd contents
            text = rng.choice([binary.decode("latin-1"), "# moeplan: model=" + rng.choice(PATHS) + " gpus=8\n",
                               "model.tensor_model_parallel_size=" + rng.choice(NUMBERS), "--tensor-model-parallel-size "
                               + rng.choice(NUMBERS), "a: [" * 2000, rng.choice(UNICODE) * 10])
            if rng.random() < 0.5:
                yield "POST", "/check", {"data": {"text": text, "gpus": rng.choice(NUMBERS), "model": _value(rng)}}
            else:
                yield "POST", "/explain", {"data": {"a_text": text, "b_text": text, "file_model": _value(rng),
                                                    "file_gpus": rng.choice(NUMBERS)}}
        else:  # questions with odd field values
            base = dict(p.split("=") for p in GOOD.split("&"))
            for _ in range(rng.randint(1, 4)):
                base[rng.choice(FIELDS)] = _value(rng)
            yield "GET", rng.choice(views), {"params": base, "headers": rng.choice([{}, {"HX-Request": "true"}])}


def _files(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*")} if root.is_dir() else set()


def test_200_hostile_requests(client: Any, upload_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                              caplog: pytest.LogCaptureFixture) -> None:
    need("starlette")
    watched = tmp_path / "tempdir"  # where any tempfile the app or a parser opens would land
    watched.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(watched))
    repo = Path(__file__).resolve().parents[2]
    before_repo = {p.name for p in repo.iterdir()}
    caplog.set_level(logging.ERROR, logger="moeplan.web")
    statuses: dict[int, int] = {}
    count = 0
    for method, url, kw in _requests(random.Random(35)):
        r = client.request(method, url, **kw)
        count += 1
        statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
        assert r.status_code < 500, (method, url, r.status_code, r.text[:500])
        assert "Traceback" not in r.text
        assert str(upload_dir) not in r.text  # no server path said back
    assert count == 200
    assert not [r for r in caplog.records if r.name == "moeplan.web"], [r.getMessage() for r in caplog.records]
    assert statuses.get(413, 0) >= 5 and statuses.get(422, 0) >= 50, statuses
    # nothing written outside the upload directory, and in it only hash-named uploads
    assert not list(watched.iterdir())
    assert {p.name for p in repo.iterdir()} == before_repo
    for root in (Path(tempfile.gettempdir()), Path("/tmp"), upload_dir.parent, repo):
        assert not [p for p in root.glob(f"*{MARKER}*")], root
    assert all(re.fullmatch(r"[0-9a-f]{16}\.(json|yaml)", p.name) for p in upload_dir.iterdir()), \
        sorted(p.name for p in upload_dir.iterdir())
    # the server still answers
    r = client.get("/plan?" + GOOD)
    assert r.status_code == 200 and 'id="plan-table"' in r.text
