"""The ASGI app of ``moeplan serve``: one page, four views (Plan, Sweep, Check, Explain) over the API the CLI
uses, so the page shows the CLI's numbers. The URL holds the question (the CLI's flag names, ``_`` for
``-``): ``/plan?model=deepseek-v3&gpu=h100&gpus=1024&seq_len=128k&gbs=1024`` opens that plan. Fields update
the answer through htmx (vendored in ``static/``, no CDN); the page shares its tables and figures with the
HTML report (:mod:`moeplan.report`, ``moeplan/templates/parts.html.j2``, :mod:`moeplan.plots`).

Bad input answers 422 with moeplan's one line beside its field; a request body over 1 MiB answers 413; no
request answers 500 (an unexpected error is logged with its traceback and answered 400 in one line).
Uploads live in one temporary directory, removed when the app stops.
"""

from __future__ import annotations

import gzip
import logging
import shlex
import shutil
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from moeplan.base.errors import MoeplanError
from moeplan.base.routing import DEFAULT_ROUTING, ROUTINGS, routing_words
from moeplan.run.knobs import knob_named
from moeplan.web.forms import (MAX_UPLOAD_BYTES, PLAN_PINS, Form, Uploads, field_of, gpu_arg, hardware_arg,
                               model_arg)

log = logging.getLogger("moeplan.web")

HERE = Path(__file__).parent
EXAMPLE = {"model": "deepseek-v3", "gpu": "h100", "gpus": "1024", "seq_len": "128k", "gbs": "1024"}
SWEEP_EXAMPLE = {"model": "qwen3-30b-a3b", "gpu": "h100", "gpus": "64", "seq_len": "16k,32k,64k,128k",
                 "gbs_tokens": "4m"}
EXPLAIN_EXAMPLE = {"model": "deepseek-v3", "gpu": "h100", "gpus": "1024", "seq_len": "32k,128k", "gbs_tokens": "128m"}
# The step's Gantt chart is drawn where one iteration has at most this many forward/backward operations
# (PP x VPP x micro-batches x 2; the headline DeepSeek-V3 128K plan has 32,768): beyond, building the timeline
# alone would keep a request for minutes. The trace download follows the same rule.
MAX_TIMELINE_OPS = 250_000
CACHE_SIZE = 16  # plan answers kept (figures and downloads of a plan reuse its search)
ERROR_STATUS = 422


class _BodyTooLarge(Exception):
    pass


class Guard:
    """ASGI middleware: request bodies over ``limit`` bytes answer 413 before they are read in full, and an
    unexpected exception is logged (with its traceback) and answered 400 in one line, never 500; the server
    keeps running."""

    def __init__(self, app: Any, limit: int = MAX_UPLOAD_BYTES) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]],
                       send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_tracked(message: dict[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        async def answer(status: int, text: str) -> None:
            await PlainTextResponse(text + "\n", status_code=status)(scope, receive, send)

        length = dict(scope.get("headers") or ()).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            await answer(413, f"moeplan: request body over {self.limit:,} bytes (1 MiB); not read")
            return
        seen = 0

        async def receive_limited() -> dict[str, Any]:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _BodyTooLarge
            return message

        try:
            await self.app(scope, receive_limited, send_tracked)
        except _BodyTooLarge:
            if not started:
                await answer(413, f"moeplan: request body over {self.limit:,} bytes (1 MiB); not read")
        except Exception as exc:  # noqa: BLE001  (the catch-all: logged, answered, the server goes on)
            log.exception("unexpected error answering %s %s", scope.get("method"), scope.get("path"))
            if not started:
                await answer(400, f"moeplan: could not answer this request ({type(exc).__name__}; logged on the server)")


class Engine:
    """The API calls behind the views, one at a time (a lock: a local page for one user, and the engine keeps
    process-wide state, its caches and the garbage-collector pause around a timeline, timeline.gc_paused);
    the last :data:`CACHE_SIZE` plan searches kept by question (a figure or download of a plan reuses it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.plans: OrderedDict[tuple[Any, ...], Any] = OrderedDict()

    def search(self, model: str, kwargs: dict[str, Any]) -> Any:
        from moeplan import api

        key = (model, tuple(sorted((k, repr(v)) for k, v in kwargs.items())))
        with self.lock:
            if key in self.plans:
                self.plans.move_to_end(key)
                return self.plans[key]
            found = api.search_plans(model, **kwargs)
            self.plans[key] = found
            while len(self.plans) > CACHE_SIZE:
                self.plans.popitem(last=False)
            return found

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            return fn(*args, **kwargs)


# ----------------------------------------------------------------------------------- reading the forms


def catalogs(hardware: str | None = None) -> dict[str, Any]:
    from moeplan.hardware import hardware_names
    from moeplan.base.fields import VERSIONS
    from moeplan.models import catalog_names
    from moeplan.base.vocab import DEFAULT_MCORE_VERSION

    try:
        gpus = hardware_names(hardware)
    except MoeplanError:
        gpus = hardware_names()
    return {"models": catalog_names(), "gpus": gpus, "precisions": knob_named("precision").choices, "versions": VERSIONS,
            "default_version": DEFAULT_MCORE_VERSION, "dispatchers": knob_named("dispatcher").choices, "pins": PLAN_PINS,
            "routings": ROUTINGS, "default_routing": DEFAULT_ROUTING}


def routing_arg(form: Form) -> str | None:
    """The routing select (forced | natural), which the API resolves to the imbalance as the CLI's --routing
    (moeplan.base.routing.resolve_imbalance); None: the default, forced."""
    return form.choice("routing", ROUTINGS, None)


def precision_arg(form: Form) -> str | None:
    """The precision select: the knob table's values and default (moeplan.run.knobs), as the CLI's --precision."""
    knob = knob_named("precision")
    return form.choice("precision", knob.choices, knob.api_default)


PLAN_FIELDS = ("model", "hardware", "gpu", "gpus", "seq_len", "gbs", "precision", "routing", "mcore_version", "top",
               *PLAN_PINS, "recompute", "dispatcher", "plan")


def plan_question(form: Form, uploads: Uploads) -> tuple[str | None, dict[str, Any]]:
    """The plan form as :func:`moeplan.api.search_plans` arguments (the CLI's `moeplan plan` flags)."""
    from moeplan.base.fields import VERSIONS
    from moeplan.base.vocab import DEFAULT_MCORE_VERSION

    model = model_arg(form, uploads)
    hardware = hardware_arg(form, uploads)
    gpu = gpu_arg(form, hardware)
    kw: dict[str, Any] = dict(gpu=gpu, hardware_file=hardware, gpus=form.count("gpus", required=True),
                              seq_len=form.tokens("seq_len", required=True), gbs=form.count("gbs", required=True),
                              precision=precision_arg(form), routing=routing_arg(form),
                              mcore_version=form.choice("mcore_version", VERSIONS, DEFAULT_MCORE_VERSION),
                              top=form.count("top", default=5))
    if kw["top"] is not None and kw["top"] > 20:
        form.fail("top", f"top must be at most 20, got {kw['top']}")
    fixed: dict[str, Any] = {}
    for pin in PLAN_PINS:
        n = form.count(pin)
        if n is not None:
            fixed[pin] = n
    recompute = form.text("recompute")
    if recompute:
        fixed["recompute"] = recompute
    knob = knob_named("dispatcher")
    dispatcher = form.choice("dispatcher", knob.choices, knob.api_default)
    if dispatcher and dispatcher != "auto":
        fixed["dispatcher"] = dispatcher
    kw["fixed"] = fixed
    return model, kw


def selected_plan(form: Form, n_plans: int) -> int:
    n = form.count("plan", default=1, bound="top") or 1
    if n > max(n_plans, 1):
        form.fail("plan", f"plan {n}: the answer has {n_plans} plan(s)")
        return 1
    return n


SWEEP_FIELDS = ("model", "hardware", "gpu", "gpus", "seq_len", "gbs_tokens", "precision", "routing", "mcore_version")


def sweep_question(form: Form, uploads: Uploads) -> tuple[str | None, dict[str, Any]]:
    from moeplan.base.fields import VERSIONS
    from moeplan.base.vocab import DEFAULT_MCORE_VERSION

    model = model_arg(form, uploads)
    hardware = hardware_arg(form, uploads)
    kw = dict(gpu=gpu_arg(form, hardware), hardware_file=hardware, gpus=form.count("gpus", required=True),
              seq_lens=form.lengths("seq_len", required=True), gbs_tokens=form.tokens("gbs_tokens", required=True),
              precision=precision_arg(form), routing=routing_arg(form),
              mcore_version=form.choice("mcore_version", VERSIONS, DEFAULT_MCORE_VERSION))
    return model, kw


# ----------------------------------------------------------------------------------- pages


def create_app(upload_dir: str | Path | None = None) -> Starlette:
    """The app. ``upload_dir``: where uploads are kept (default: a new temporary directory, removed when the
    app shuts down)."""
    from moeplan.templating import environment

    own_dir = upload_dir is None
    root = Path(tempfile.mkdtemp(prefix="moeplan-serve-")) if own_dir else Path(upload_dir)
    uploads = Uploads(root)
    engine = Engine()
    env = environment(str(HERE / "templates"))

    def page(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        html = env.get_template(name).render(request=request, **context)
        return HTMLResponse(html, status_code=status)

    def is_fragment(request: Request) -> bool:
        return request.headers.get("hx-request") == "true" and request.headers.get("hx-boosted") != "true"

    def failed(form: Form, fields: tuple[str, ...], exc: MoeplanError) -> None:
        message = uploads.hide(str(exc))
        form.fail(field_of(message, fields) or "form", message)

    def query_of(form: Form, fields: tuple[str, ...], **extra: Any) -> str:
        items = {k: form.raw(k) for k in fields if form.raw(k)}
        items.update({k: str(v) for k, v in extra.items() if v is not None})
        return urlencode(items)

    # ------------------------------------------------------------------ plan

    def plan_answer(form: Form) -> dict[str, Any]:
        """What the plan view shows for a question: the plans, their exports and the selected plan's summary."""
        from moeplan import report

        model, kw = plan_question(form, uploads)
        if form.errors:
            return {}
        try:
            found = engine.search(model, kw)
        except MoeplanError as exc:
            failed(form, PLAN_FIELDS, exc)
            return {}
        result = found.as_dict()
        plans = result["plans"]
        shown = form.raw("model") if form.raw("model").startswith("upload:") else result["model"]
        out: dict[str, Any] = {"result": result, "plans": plans, "budget_gib": found.memory_budget_bytes / 1024**3,
                               "model": f"{shown} ({found.model.model_type})" if shown != result["model"] else shown,
                               "routing": routing_words(result)}
        if not plans:
            out["no_fit"] = report.no_fit_sentence(result)  # the CLI's line (one function words it)
            return out
        n = selected_plan(form, len(plans))
        p = plans[n - 1]
        out.update(n=n, plan=p, layout=report.plan_layout_label(p), plan_table=report.plan_table(plans, bands=True),
                   summary=report.summary_section(found.plans[n - 1].estimate.as_dict(), plans), exports=exports_of(p),
                   launch=launch_downloads(found.plans[n - 1].config),
                   query=query_of(form, PLAN_FIELDS, plan=n),
                   picks=[(q["rank"], q["tie"], query_of(form, PLAN_FIELDS, plan=q["rank"])) for q in plans])
        return out

    async def plan_view(request: Request) -> Response:
        if not request.query_params:
            return RedirectResponse("/plan?" + urlencode(EXAMPLE), status_code=303)
        form = Form.of(request.query_params)
        answer = await run_in_threadpool(plan_answer, form)
        status = ERROR_STATUS if form.errors else 200
        hardware = uploads_hardware(form)
        name = "plan_result.html.j2" if is_fragment(request) else "plan.html.j2"
        return page(request, name, status, view="plan", form=form, fields=PLAN_FIELDS, a=answer, cat=catalogs(hardware))

    def uploads_hardware(form: Form) -> str | None:
        try:
            return str(uploads.path("hardware", form.raw("hardware"))) if form.raw("hardware") else None
        except MoeplanError:
            return None

    def plan_of(form: Form) -> tuple[Any, Any]:
        """The plan a figure or a download is of (the search is cached)."""
        model, kw = plan_question(form, uploads)
        if form.errors:
            raise MoeplanError(next(iter(form.errors.values())))
        found = engine.search(model, kw)
        if not found.plans:
            raise MoeplanError("no layout fits: no plan to draw or export")
        n = selected_plan(form, len(found.plans))
        if form.errors:
            raise MoeplanError(next(iter(form.errors.values())))
        return found, found.plans[n - 1]

    def timeline_refusal(cfg: Any) -> str | None:
        from moeplan.engine.timeline import schedule_problem

        par = cfg.parallel
        mb = cfg.batch.microbatches(par.dp)
        problem = schedule_problem(par.pp, par.vpp, mb)
        if problem:
            return f"Megatron-Core refuses this pipeline schedule: {problem}"
        ops = 2 * par.pp * par.vpp * mb
        if ops > MAX_TIMELINE_OPS:
            return (f"one iteration has {ops:,} forward/backward operations (PP {par.pp} x VPP {par.vpp} x {mb:,} "
                    f"micro-batches x 2); the page draws at most {MAX_TIMELINE_OPS:,}")
        return None

    def figure_html(form: Form, name: str) -> str:
        from moeplan import api, plots, report
        from moeplan.templating import macro

        found, p = plan_of(form)
        est = p.estimate.as_dict()
        if name == "plans":
            plans = found.as_dict()["plans"]
            budget = found.memory_budget_bytes / 1024**3
            return str(macro("figure", pid="plans-memory-plot",
                             svg=engine.call(report.plot_svg, lambda: plots.plans_memory_figure(plans, budget))))
        if name == "memory":
            return str(engine.call(report.memory_section, est, est["memory_ranks_gib"]))
        if name == "time":
            return str(engine.call(report.time_section, est))
        refused = timeline_refusal(p.config)
        if refused:
            return f'<p class="note" id="timeline">No timeline: {escape_html(refused)}.</p>'
        tl = engine.call(api.timeline, p.config, p.gpu)
        return str(engine.call(report.timeline_section, tl))

    async def plan_figure(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in ("plans", "memory", "time", "timeline"):
            return error_line(404, f"no figure '{name}'; figures: plans, memory, time, timeline")
        form = Form.of(request.query_params)
        try:
            html = await run_in_threadpool(figure_html, form, name)
        except MoeplanError as exc:
            return error_line(ERROR_STATUS, uploads.hide(str(exc)))
        return HTMLResponse(html)

    def download(form: Form, kind: str) -> tuple[bytes, str, str]:
        from moeplan import api
        from moeplan.run.strategy import strategy_text
        from moeplan.engine.timeline import chrome_trace_bytes

        found, p = plan_of(form)
        cfg = p.config
        ex = exports_of(api.plan_dict(p, 1))
        if kind == "overrides":
            return ex["overrides"].encode(), "overrides.txt", "text/plain; charset=utf-8"
        if kind == "yaml":
            return ex["yaml"].encode(), "plan.yaml", "application/yaml"
        if kind == "megatron-lm":
            return ex["megatron_lm"].encode(), "megatron-lm-args.txt", "text/plain; charset=utf-8"
        if kind == "strategy":
            return strategy_text(cfg).encode(), "strategy.yaml", "application/yaml"
        if kind in LAUNCH_DOWNLOADS:
            from moeplan.megatron.launch import launch_command

            return launch_command(cfg, kind).encode(), LAUNCH_DOWNLOADS[kind], "text/x-shellscript; charset=utf-8"
        refused = timeline_refusal(cfg)
        if refused:
            raise MoeplanError(f"no trace: {refused}")
        tl = engine.call(api.timeline, cfg, p.gpu)
        data = gzip.compress(engine.call(chrome_trace_bytes, tl), compresslevel=6, mtime=0)
        return data, "trace.json.gz", "application/gzip"

    async def plan_download(request: Request) -> Response:
        kind = request.path_params["kind"]
        if kind not in DOWNLOADS:
            return error_line(404, f"no download '{kind}'; downloads: {', '.join(DOWNLOADS)}")
        form = Form.of(request.query_params)
        try:
            data, filename, media = await run_in_threadpool(download, form, kind)
        except MoeplanError as exc:
            return error_line(ERROR_STATUS, uploads.hide(str(exc)))
        return Response(data, media_type=media, headers={"Content-Disposition": f'attachment; filename="{filename}"'})

    # ------------------------------------------------------------------ uploads

    async def upload(request: Request) -> Response:
        kind = request.path_params["kind"]
        if kind not in Uploads.KINDS:
            return error_line(404, f"no upload '{kind}'; uploads: model (config.json), hardware (YAML)")
        data = await read_file_field(request, f"{kind}_file", "file")
        if isinstance(data, Response):
            return data
        if data is None:
            return error_line(ERROR_STATUS, "no file: send it as the form's 'file' field", field=kind)
        try:
            ref = await run_in_threadpool(engine.call, uploads.save, kind, data)
        except MoeplanError as exc:
            return error_line(ERROR_STATUS, f"{'config.json' if kind == 'model' else 'hardware file'}: "
                              f"{uploads.hide(str(exc))}", field=kind)
        names: list[str] = []
        if kind == "hardware":
            from moeplan.hardware import hardware_names, load_user_hardware

            path = uploads.path("hardware", ref)
            own = list(load_user_hardware(path))  # the file's GPUs first, then the catalog's
            names = own + [n for n in hardware_names(path) if n not in own]
        response = page(request, "upload_result.html.j2", kind=kind, ref=ref, gpus=names)
        response.headers["HX-Trigger-After-Settle"] = "moeplan-replan"
        return response

    async def read_file_field(request: Request, *names: str) -> bytes | Response | None:
        """The bytes of a multipart form's file (or text) field, the first of ``names`` the form has with a
        value (the page's upload fields are named ``model_file`` / ``hardware_file``; ``file`` for a script);
        None where none is there."""
        try:
            async with request.form(max_files=4, max_fields=32) as form:
                item = next((form[n] for n in names if n in form and (not isinstance(form[n], UploadFile)
                                                                      or form[n].filename or form[n].size)), None)
                if item is None:
                    return None
                if isinstance(item, UploadFile):
                    data = await item.read(MAX_UPLOAD_BYTES + 1)
                else:
                    data = item.encode()
        except _BodyTooLarge:
            raise
        except Exception as exc:  # noqa: BLE001  (a malformed body: Starlette's parser says why)
            return error_line(400, f"cannot read the form: {getattr(exc, 'detail', None) or exc}")
        if len(data) > MAX_UPLOAD_BYTES:
            return error_line(413, f"the file is over {MAX_UPLOAD_BYTES:,} bytes (1 MiB)")
        return data

    # ------------------------------------------------------------------ sweep

    def sweep_answer(form: Form) -> dict[str, Any]:
        from moeplan import api, report

        model, kw = sweep_question(form, uploads)
        if form.errors:
            return {}
        try:
            rows = engine.call(api.sweep, model, **kw)
        except MoeplanError as exc:
            failed(form, SWEEP_FIELDS, exc)
            return {}
        return {"rows": rows, "section": engine.call(report.sweep_section, rows),
                "missing": sum("parallel" not in r for r in rows),
                "routing": routing_words(rows[0]) if rows else ""}  # one question: every row's routing is the same

    async def sweep_view(request: Request) -> Response:
        if not request.query_params:
            return RedirectResponse("/sweep?" + urlencode(SWEEP_EXAMPLE), status_code=303)
        form = Form.of(request.query_params)
        answer = await run_in_threadpool(sweep_answer, form)
        status = ERROR_STATUS if form.errors else 200
        name = "sweep_result.html.j2" if is_fragment(request) else "sweep.html.j2"
        return page(request, name, status, view="sweep", form=form, fields=SWEEP_FIELDS, a=answer,
                    cat=catalogs(uploads_hardware(form)))

    # ------------------------------------------------------------------ check

    CHECK_FIELDS = ("text", "file", "model", "gpu", "gpus", "mcore_version")

    def run_file(form: Form, text: str, display: str, name: str) -> Path | None:
        """``text`` written to a new file in the upload directory (removed by the caller), after refusing a
        '# moeplan:' comment that would have the server read a file by path."""
        from moeplan.megatron.read import parse_run_text
        from moeplan.models import catalog_names

        try:
            parsed = parse_run_text(text, display)
        except MoeplanError as exc:
            form.fail(name, str(exc))
            return None
        prov = parsed.provenance
        if not form.raw("model") and prov.get("model") and prov["model"].lower() not in catalog_names():
            form.fail(name, f"{display}: the '# moeplan:' comment names model {prov['model']}, which the page does "
                            "not read from the server's disk; choose the model (a catalog name or an uploaded "
                            "config.json)")
            return None
        if prov.get("hardware"):
            form.fail(name, f"{display}: the '# moeplan:' comment names hardware file {prov['hardware']}, which the "
                            "page does not read from the server's disk; remove hardware= from the comment and "
                            "choose a catalog GPU")
            return None
        handle = tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt", dir=root, delete=False)
        with handle:
            handle.write(text)
        return Path(handle.name)

    def check_answer(form: Form, text: str | None) -> dict[str, Any]:
        from moeplan import report
        from moeplan.lint import checker
        from moeplan.base.fields import VERSIONS

        if not text or not text.strip():
            form.fail("text", "paste a Bridge YAML, overrides or Megatron-LM arguments, or upload the file")
            return {}
        model = model_arg(form, uploads, required=False)
        gpu = gpu_arg(form, None, required=False)
        gpus = form.count("gpus")
        version = form.choice("mcore_version", VERSIONS, None)
        if form.errors:
            return {}
        path = run_file(form, text, "the pasted file", "text")
        if path is None:
            return {}
        try:
            result = engine.call(checker.check, str(path), model=model, gpu=gpu, gpus=gpus, mcore_version=version)
        except MoeplanError as exc:
            message = str(exc).replace(str(path), "the pasted file")
            form.fail(field_of(message, ("model", "gpu", "gpus", "mcore_version")) or "text", uploads.hide(message))
            return {}
        finally:
            path.unlink(missing_ok=True)
        est = result.estimate_dict()  # with the routing it assumed
        numbered = [f for f in result.findings if f.fix]
        findings = [{"severity": f.severity, "rule": f.rule, "line": f.line or "",
                     "message": f.message.replace(str(path), "the pasted file"),
                     "fix": numbered.index(f) + 1 if f.fix else None} for f in result.findings]
        fixes = [{"n": i, "rule": f.rule, "line": f.line, "lines": result.fix_lines(f)}
                 for i, f in enumerate(numbered, start=1)]
        return {"result": result.as_dict(), "kind": result.kind, "findings": findings, "fixes": fixes,
                "summary_line": result.summary(), "routing": routing_words(est) if est else "",
                "summary": report.summary_section(est, []) if est else None}

    async def check_view(request: Request) -> Response:
        form = Form.of(request.query_params)
        answer: dict[str, Any] = {}
        status = 200
        if request.method == "POST":
            got = await read_check_form(request)
            if isinstance(got, Response):
                return got
            form, text = got
            answer = await run_in_threadpool(check_answer, form, text)
            status = ERROR_STATUS if form.errors else 200
        name = "check_result.html.j2" if is_fragment(request) and request.method == "POST" else "check.html.j2"
        return page(request, name, status, view="check", form=form, fields=CHECK_FIELDS, a=answer, cat=catalogs())

    async def read_check_form(request: Request) -> tuple[Form, str | None] | Response:
        try:
            async with request.form(max_files=4, max_fields=32) as data:
                values: dict[str, str] = {}
                text: str | None = None
                for k, v in data.multi_items():
                    if isinstance(v, UploadFile):
                        if k == "file" and (v.filename or v.size):
                            raw = await v.read(MAX_UPLOAD_BYTES + 1)
                            if raw:
                                try:
                                    text = raw.decode("utf-8")
                                except UnicodeDecodeError:
                                    form = Form({})
                                    form.fail("file", "the uploaded file is not UTF-8 text (a YAML, overrides or "
                                                      "Megatron-LM arguments)")
                                    return form, None
                    elif k == "text":
                        text = text or v
                    else:
                        values[k] = v.strip()
        except _BodyTooLarge:
            raise
        except Exception as exc:  # noqa: BLE001
            return error_line(400, f"cannot read the form: {getattr(exc, 'detail', None) or exc}")
        form = Form(values)
        if text is not None and "text" not in values:
            form.values["text"] = text if len(text) <= 20_000 else ""
        return form, text

    # ------------------------------------------------------------------ explain

    EXPLAIN_FIELDS = ("model", "hardware", "gpu", "gpus", "seq_len", "gbs_tokens", "precision", "mcore_version",
                      "a_text", "b_text", "file_model", "file_gpus")

    def explain_model(form: Form) -> dict[str, Any]:
        from moeplan import api

        model, kw = sweep_question(form, uploads)
        if not form.errors and len(kw["seq_lens"] or []) != 2:
            form.fail("seq_len", "explain compares the model at two lengths: give seq_len A,B (e.g. 32k,128k)")
        if form.errors:
            return {}
        try:
            points = engine.call(api.sweep_points, model, first_invalid_raises=True, **kw)
        except MoeplanError as exc:
            failed(form, EXPLAIN_FIELDS, exc)
            return {}
        for pt in points:
            if pt.estimate is None:
                return {"no_answer": f"no layout fits at seq {pt.seq_len:,}; nothing to compare"}
        return explained(points[0].estimate, points[1].estimate)

    def explained(a: Any, b: Any) -> dict[str, Any]:
        from moeplan import api
        from moeplan.plan.explain import compare, remedy

        comp = compare(a, b)
        found = engine.call(api.search_like, b.config, top=1)
        fix = remedy(b, found.best, found.result.newer, a)
        reasons = [*comp.reasons, fix]
        runs = [a.as_dict(), b.as_dict()]
        return {"a": runs[0], "b": runs[1], "cells": [run_cells(r) for r in runs],
                "reasons": [r.as_dict() for r in reasons]}

    def explain_files(form: Form) -> dict[str, Any]:
        from moeplan.lint import checker

        texts = {k: form.raw(k) for k in ("a_text", "b_text")}
        for k, t in texts.items():
            if not t:
                form.fail(k, "paste run " + k[0].upper() + ": a Bridge YAML, overrides or Megatron-LM arguments")
        model = model_arg(form, uploads, name="file_model", required=False)
        gpus = form.count("file_gpus", bound="gpus")
        if form.errors:
            return {}
        paths: dict[str, Path] = {}
        try:
            for k, t in texts.items():
                p = run_file(form, t, f"run {k[0].upper()}", k)
                if p is None:
                    return {}
                paths[k] = p
            ests = {}
            for k, p in paths.items():
                try:
                    ests[k] = engine.call(checker.estimate_file, str(p), model=model, gpus=gpus)
                except MoeplanError as exc:
                    message = str(exc).replace(str(p), f"run {k[0].upper()}")
                    where = field_of(message, ("model", "gpus"))
                    form.fail(f"file_{where}" if where else k, uploads.hide(message))
                    return {}
        finally:
            for p in paths.values():
                p.unlink(missing_ok=True)
        return explained(ests["a_text"], ests["b_text"])

    async def explain_view(request: Request) -> Response:
        answer: dict[str, Any] = {}
        mode = "model"
        if request.method == "POST":
            try:
                async with request.form(max_files=0, max_fields=32, max_part_size=MAX_UPLOAD_BYTES) as data:
                    form = Form.of({k: v for k, v in data.items() if isinstance(v, str)})
            except _BodyTooLarge:
                raise
            except Exception as exc:  # noqa: BLE001
                return error_line(400, f"cannot read the form: {getattr(exc, 'detail', None) or exc}")
            mode = "files"
            answer = await run_in_threadpool(explain_files, form)
        elif request.query_params:
            form = Form.of(request.query_params)
            answer = await run_in_threadpool(explain_model, form)
        else:
            return RedirectResponse("/explain?" + urlencode(EXPLAIN_EXAMPLE), status_code=303)
        status = ERROR_STATUS if form.errors else 200
        name = "explain_result.html.j2" if is_fragment(request) else "explain.html.j2"
        return page(request, name, status, view="explain", mode=mode, form=form, fields=EXPLAIN_FIELDS, a=answer,
                    cat=catalogs(uploads_hardware(form)), blank=Form({}), rows=EXPLAIN_ROWS)

    # ------------------------------------------------------------------ app

    async def home(request: Request) -> Response:
        return RedirectResponse("/plan?" + urlencode(EXAMPLE), status_code=303)

    async def not_found(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        return error_line(status, f"{getattr(exc, 'detail', None) or 'not found'}: {request.url.path}"[:300])

    @asynccontextmanager
    async def lifespan(app: Starlette):  # type: ignore[no-untyped-def]
        try:
            yield
        finally:
            if own_dir:
                shutil.rmtree(root, ignore_errors=True)

    routes = [
        Route("/", home),
        Route("/plan", plan_view),
        Route("/plan/figure/{name}", plan_figure),
        Route("/plan/download/{kind}", plan_download),
        Route("/upload/{kind}", upload, methods=["POST"]),
        Route("/sweep", sweep_view),
        Route("/check", check_view, methods=["GET", "POST"]),
        Route("/explain", explain_view, methods=["GET", "POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    from starlette.exceptions import HTTPException

    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: not_found})
    app.add_middleware(Guard)
    app.state.upload_dir = root
    return app


EXPLAIN_ROWS = (("model", "model"), ("GPUs", "gpus"), ("sequence length", "seq"), ("GBS", "gbs"),
                ("layout", "layout"), ("recompute · dispatcher", "knobs"), ("memory per GPU", "memory"),
                ("step time", "step"), ("TFLOP/s/GPU", "tflops"), ("tokens/s/GPU", "tokens"))


def run_cells(est: dict[str, Any]) -> dict[str, str]:
    """One run of the explain table, in the words and formats of the report's summary."""
    from moeplan.plots import fmt_seconds, seq_label
    from moeplan.report import peak_gib, plan_layout_label

    peak = peak_gib(est)
    return {"model": str(est["model"]), "gpus": f"{est['gpus']:,} × {est['gpu']}",
            "seq": f"{est['seq_len']:,} ({seq_label(int(est['seq_len']))})", "gbs": f"{est['gbs']:,}",
            "layout": plan_layout_label(est), "knobs": f"{est['recompute']} · {est['dispatcher']}",
            "memory": f"{peak:.1f} / {est['capacity_gib']:.1f} GiB" + ("" if est["fits"] else " (does not fit)"),
            "step": fmt_seconds(float(est["step_time_s"])), "tflops": f"{est['tflops_per_gpu']:,.1f}",
            "tokens": f"{est['tokens_per_s_per_gpu']:,.0f}"}


def escape_html(text: str) -> str:
    from markupsafe import escape

    return str(escape(text))


def error_line(status: int, message: str, field: str = "form") -> HTMLResponse:
    """moeplan's one line as an HTML fragment (what the page shows beside a field or above the form)."""
    return HTMLResponse(f'<p class="error" role="alert" data-field="{field}">moeplan: {escape_html(message)}</p>\n',
                        status_code=status)


# `moeplan plan --format bridge-launch|perf-launch`: the file each launch command downloads as
LAUNCH_DOWNLOADS = {"bridge-launch": "bridge-launch.sh", "perf-launch": "perf-launch.sh"}
DOWNLOADS = ("overrides", "yaml", "megatron-lm", *LAUNCH_DOWNLOADS, "strategy", "trace")


def launch_downloads(cfg: Any) -> dict[str, str]:
    """Per launch format, the file it downloads as, or why there is none (the CLI's one line: another Megatron-Core
    than the launchers', a model without a Bridge recipe, GPUs that fill no whole node)."""
    from moeplan.megatron.launch import launch_command

    out = {}
    for kind, filename in LAUNCH_DOWNLOADS.items():
        try:
            launch_command(cfg, kind)
            out[kind] = filename
        except MoeplanError as exc:
            out[kind] = ""
            out.setdefault("why_not", str(exc))
    return out


def exports_of(p: dict[str, Any]) -> dict[str, str]:
    """A plan's exports as the CLI writes them: ``plan --format overrides`` (the '# moeplan:' line, then one
    override a line), ``--format yaml``, ``--format megatron-lm`` (the line, then the quoted flags)."""
    return {"overrides": "\n".join([p["provenance"], *p["overrides"]]) + "\n",
            "yaml": p["yaml"],
            "megatron_lm": p["provenance"] + "\n" + " ".join(shlex.quote(a) for a in p["megatron_lm_args"]) + "\n"}
