"""`moeplan check`: read an existing run config, estimate it, and lint it (moeplan.lint.rules).

Reads Megatron Bridge YAML (ConfigContainer), Hydra-style overrides or Megatron-LM arguments
(moeplan.megatron.read). The model comes from ``--model`` or, when the file carries the architecture
(num_layers, hidden_size, num_moe_experts, ...), from the catalog entry it matches.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from moeplan.base import argcheck
from moeplan.base.errors import MoeplanError
from moeplan.base.fields import VERSIONS, check_settings, dp_assertions, normalize_version
from moeplan.base.te_release import GROUPED_TENSOR_ENV
from moeplan.base.vocab import DEFAULT_GPU, DEFAULT_HEADROOM
from moeplan.base.vocab import DEFAULT_MCORE_VERSION
from moeplan.engine.estimate import Estimate, estimate_dict, evaluate
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION, Calibration
from moeplan.hardware import GPUSpec, load_gpu
from moeplan.lint.rules import Finding, knob_fix, lint, sort_findings
from moeplan.megatron.architecture import architecture_mismatch, infer_model, with_split_layout
from moeplan.megatron.asserts import FileView, tripped
from moeplan.megatron.export import overrides_to_megatron_lm, to_settings
from moeplan.megatron.mcore import McoreNotRun, build_mcore_config, default_config_warnings, require_mcore
from moeplan.megatron.read import known_keys, read_run_file
from moeplan.megatron.to_run import run_config_from_settings
from moeplan.models import load_model
from moeplan.run.config import RunConfig
from moeplan.run.parallel import hierarchical_cp_inner

@dataclass
class CheckResult:
    config: RunConfig
    gpu: GPUSpec
    kind: str
    findings: list[Finding]
    estimate: Estimate | None = None
    notes: list[str] = field(default_factory=list)
    fix_version: str | None = None  # the release the fixes are written for (the target, else the first that runs it)
    file_paths: dict[str, str] = field(default_factory=dict)  # field -> the key or flag that set it in the file
    cal: Calibration = DEFAULT_CALIBRATION  # the timing constants of the estimate (natural routing's imbalance)

    def estimate_dict(self) -> dict[str, Any] | None:
        """The file's estimate as every answer gives it (moeplan.engine.estimate.estimate_dict), with the routing
        it assumed: the file's '# moeplan:' imbalance or the --moe-imbalance flag; null without experts."""
        return None if self.estimate is None else estimate_dict(self.estimate, self.cal)

    @property
    def errors(self) -> int:
        return sum(1 for f in self.findings if f.severity == "error")

    @property
    def warnings(self) -> int:
        return sum(1 for f in self.findings if f.severity == "warning")

    @property
    def infos(self) -> int:
        return sum(1 for f in self.findings if f.severity == "info")

    def summary(self) -> str:
        """'1 error, 2 warnings, 3 information findings'."""
        def n(count: int, word: str, plural: str) -> str:
            return f"{count} {word if count == 1 else plural}"
        return ", ".join((n(self.errors, "error", "errors"), n(self.warnings, "warning", "warnings"),
                          n(self.infos, "information finding", "information findings")))

    def fix_lines(self, finding: Finding) -> list[str]:
        """A finding's fix in the file's own language: Megatron-LM arguments for a Megatron-LM argument list,
        else the Megatron Bridge overrides."""
        if self.kind == "megatron-lm":
            return overrides_to_megatron_lm(finding.fix, self.fix_version or self.config.mcore_version, self.file_paths)
        return list(finding.fix)

    def as_dict(self) -> dict[str, Any]:
        mlm = self.kind == "megatron-lm"
        return {"kind": self.kind, "model": self.config.model.name, "gpu": self.gpu.name,
                "gpus": self.config.parallel.gpus, "errors": self.errors,
                "warnings": self.warnings, "infos": self.infos,
                "findings": [f.as_dict() | ({"fix_megatron_lm": self.fix_lines(f)} if mlm else {})
                             for f in self.findings],
                "estimate": self.estimate_dict()}


@dataclass(frozen=True)
class _Provenance:
    """What a moeplan export's '# moeplan:' comment names (None / False: not said)."""

    model: str | None
    gpu: str | None
    gpus: int | None
    mcore_version: str | None
    te_version: str | None
    grouped_tensor: bool
    """Its ``NVTE_GROUPED_LINEAR_USE_FUSED_GROUPED_GEMM=1`` (export.env_settings): TE's grouped-tensor path."""
    hardware: str | None
    """The user hardware file the GPU came from (an absolute path)."""
    moe_imbalance: float | None = None
    """The routing imbalance the plan assumed (export.provenance_comment), which no Megatron field says."""
    reserve_gib: float | None = None
    """The memory reserve the plan assumed."""


def _from_provenance(parsed: Any, path: str) -> _Provenance:
    """The run's model, GPU, GPU count, versions, TE grouped-tensor path and hardware file as its '# moeplan:'
    comment names them."""
    p = parsed.provenance
    gpus = p.get("gpus")
    if gpus is not None and not (gpus.isdigit() and int(gpus) > 0):
        raise MoeplanError(f"{path}: the '# moeplan:' comment says gpus={gpus}; expected a positive integer")
    # TE reads the variable as an integer (int(os.getenv(..., "0")) in grouped_linear.py): non-zero selects the path
    # the script's own setting (export, VAR=1 torchrun ...: ParsedRun.env) is what the job runs with; then the comment
    flag = parsed.env.get(GROUPED_TENSOR_ENV, p.get(GROUPED_TENSOR_ENV, "0")).strip() or "0"
    try:
        grouped = int(flag) != 0
    except ValueError:
        raise MoeplanError(f"{path}: the '# moeplan:' comment says {GROUPED_TENSOR_ENV}={flag}; Transformer Engine reads "
                           "an integer (0 off, 1 on)") from None
    assumed: dict[str, float] = {}
    for key in ("moe-imbalance", "reserve-gib"):
        text = p.get(key)
        if text is None:
            continue
        try:
            assumed[key] = float(text)
        except ValueError:
            raise MoeplanError(f"{path}: the '# moeplan:' comment says {key}={text}; expected a number") from None
    return _Provenance(model=p.get("model"), gpu=p.get("gpu"), gpus=int(gpus) if gpus else None,
                       mcore_version=p.get("mcore-version"), te_version=p.get("te-version"), grouped_tensor=grouped,
                       hardware=p.get("hardware"), moe_imbalance=assumed.get("moe-imbalance"),
                       reserve_gib=assumed.get("reserve-gib"))


def _writable(cfg: RunConfig) -> tuple[RunConfig | None, str | None]:
    """(the run as a release can write it, why its target cannot): ``(cfg, None)`` where the target writes it or
    its layout is invalid (the linter reports that); the run at the first later release that writes it and the
    target's refusal; ``(None, refusal)`` where no release writes it (a combination Megatron refuses in every
    release, e.g. a token budget per rank without HybridEP: the fixes, which are written runs, cannot be made)."""
    if cfg.layout_checks():
        return cfg, None
    refusals: list[str] = []  # the target's first, the newest release's last
    for version in VERSIONS[VERSIONS.index(normalize_version(cfg.mcore_version)):]:
        run = cfg if version == normalize_version(cfg.mcore_version) else cfg.with_(mcore_version=version)
        try:
            to_settings(run, version)
        except MoeplanError as exc:
            refusals.append(str(exc))
            continue
        return run, refusals[0] if refusals else None
    return None, refusals[-1]  # the newest release's refusal: what no upgrade mends


def load_run(path: str, *, model: str | None = None, gpu: str | None = None, gpus: int | None = None,
             hardware_file: str | None = None, mcore_version: str | None = None,
             seq_len: int | None = None, te_version: str | None = None,
             te_grouped_tensor: bool = False) -> tuple[RunConfig, GPUSpec, Any]:
    """(RunConfig, GPU, parsed file) for a run file. Model, GPU (and its hardware file), GPU count, Megatron-Core
    and TE versions come from the arguments, else from the file's '# moeplan:' comment (moeplan's exports carry
    one; a model from a config.json and a user hardware file by absolute path: ``gpu`` is looked up in that file
    first, then the catalog; only ``hardware_file`` replaces it); TE's grouped-tensor path from
    ``te_grouped_tensor``, the script's NVTE_GROUPED_LINEAR_USE_FUSED_GROUPED_GEMM (export or inline), or the comment's."""
    argcheck.path_like("path", path)
    if model is not None:
        argcheck.path_like("model", model)
    if gpus is not None:
        argcheck.count("gpus", gpus)
    if seq_len is not None:
        argcheck.count("seq_len", seq_len)
    parsed = read_run_file(path)
    prov = _from_provenance(parsed, path)
    if model:
        spec = load_model(model)
    elif prov.model and Path(prov.model).is_absolute():  # an export of a model read from a config.json
        if not Path(prov.model).is_file():
            raise MoeplanError(f"{path}: the '# moeplan:' comment names model file {prov.model}, which does not "
                               "exist; pass --model NAME or a config.json")
        spec = load_model(prov.model)
    elif prov.model:
        try:
            spec = load_model(prov.model)
        except MoeplanError:
            raise MoeplanError(f"{path}: the '# moeplan:' comment names model {prov.model}, which is not in the "
                               "catalog or a config.json here; pass --model") from None
    else:
        spec = infer_model(parsed.architecture, path)
    gpus = gpus or prov.gpus
    if gpus is None:
        raise MoeplanError(f"{path}: the GPU count is not in the file; pass --gpus N")
    # the comment's hardware file, unless --hardware replaces it; with --gpu the name is looked up there first,
    # then in the catalog (a catalog GPU needs no file: with the file gone, only a GPU of its own fails)
    f_hardware = prov.hardware if not hardware_file else None
    if f_hardware and not Path(f_hardware).is_file():  # the comment's GPU came from a user hardware file
        missing = (f"{path}: the '# moeplan:' comment names hardware file {f_hardware}, which does not exist; pass "
                   "--hardware FILE.yaml")
        if not gpu:
            raise MoeplanError(missing + " (or --gpu NAME of a catalog GPU)")
        try:
            gpu_spec = load_gpu(gpu)
        except MoeplanError:
            raise MoeplanError(f"{missing}: GPU '{gpu}' is not in the catalog") from None
    else:
        gpu_spec = load_gpu(gpu or prov.gpu or DEFAULT_GPU, hardware_file or f_hardware)
    version = mcore_version or prov.mcore_version or DEFAULT_MCORE_VERSION
    cfg = with_split_layout(run_config_from_settings(parsed.settings, spec, gpus, gpu_spec,
                                                     mcore_version=version), parsed.architecture)
    if te_version or prov.te_version:  # the flag, else the file's '# moeplan:' comment, else the default
        cfg = cfg.with_(te_version=te_version or prov.te_version)
    if te_grouped_tensor or prov.grouped_tensor:
        cfg = cfg.with_(te_grouped_tensor=True)
    try:  # the export's assumptions; check's flags win later
        cfg = _with_unsaid(cfg, prov.moe_imbalance, prov.reserve_gib)
    except MoeplanError as exc:
        raise MoeplanError(f"{path}: the '# moeplan:' comment: {exc}") from None
    if seq_len is not None:
        cfg = cfg.with_(batch=replace(cfg.batch, seq_len=seq_len))
    return cfg, gpu_spec, parsed


def check(path: str, *, model: str | None = None, gpu: str | None = None, gpus: int | None = None,
          hardware_file: str | None = None, mcore_version: str | None = None, headroom: float = DEFAULT_HEADROOM,
          run_mcore: bool = False, cal: Calibration = DEFAULT_CALIBRATION, te_version: str | None = None,
          te_grouped_tensor: bool = False, moe_imbalance: float | None = None,
          reserve_gib: float | None = None) -> CheckResult:
    """Findings for a run file, errors first, with the estimate when the layout is valid. ``run_mcore`` where
    megatron-core cannot be imported: MoeplanError (one line, its install hint) before the file is read. Routing
    imbalance and memory reserve, which no run file says: the arguments (None: RunConfig's defaults)."""
    # the API's boundary checks (moeplan.base.argcheck, as moeplan.api's functions); path, model and gpus: load_run's
    argcheck.headroom(headroom)
    argcheck.flags(run_mcore=run_mcore, te_grouped_tensor=te_grouped_tensor)
    argcheck.calibration(cal, Calibration)
    argcheck.imbalance_and_reserve(moe_imbalance, reserve_gib, optional=True)
    argcheck.gpu_name(gpu, optional=True)
    argcheck.optional_path("hardware_file", hardware_file)
    if run_mcore:  # refused up front without megatron-core (bad input, exit 2), as --plot without matplotlib
        require_mcore()
    cfg, gpu_spec, parsed = load_run(path, model=model, gpu=gpu, gpus=gpus, hardware_file=hardware_file,
                                     mcore_version=mcore_version, te_version=te_version,
                                     te_grouped_tensor=te_grouped_tensor)
    cfg = _with_unsaid(cfg, moe_imbalance, reserve_gib)
    findings: list[Finding] = []
    differ = architecture_mismatch(parsed.architecture, cfg.model)
    if differ:  # e.g. --model names another model than the file trains: the estimate is not of this file's run
        said = "; ".join(f"{k} {f} in the file, {m} in {cfg.model.name}" for k, (f, m) in differ.items())
        findings.append(Finding("warning", "model-mismatch", f"the file's architecture is not {cfg.model.name}'s ({said}): "
                                "the estimate and findings are of the model's architecture; pass --model with the "
                                "model the file trains (a catalog name or its config.json)",
                                numbers={k: {"file": f, "model": m} for k, (f, m) in differ.items()},
                                line=parsed.architecture_lines.get(next(iter(differ)))))
    for conflict in parsed.conflicts:
        findings.append(Finding("error", "conflict", conflict.message, line=conflict.line))
    for repeat in parsed.repeats:
        findings.append(Finding("warning", "duplicate", repeat.message, line=repeat.line))
    version_problems = check_settings(parsed.settings, cfg.mcore_version)
    for problem in version_problems:
        findings.append(Finding("error", "mcore-version", problem.message, line=parsed.lines.get(problem.field)))
    if parsed.settings.get("recompute_modules") and parsed.settings.get("recompute_granularity") is None:
        # TransformerConfig reads recompute_modules only under recompute_granularity 'selective'
        mods, gran = (("--recompute-modules", "--recompute-granularity") if parsed.kind == "megatron-lm"
                      else ("recompute_modules", "recompute_granularity"))  # in the file's own words
        findings.append(Finding("warning", "recompute-modules-unused", f"{mods} is set but {gran} is not: "
                                f"Megatron-Core recomputes nothing; set {gran} selective to recompute them",
                                line=parsed.lines.get("recompute_modules")))
    for problem in dp_assertions(parsed.settings, cfg.mcore_version):  # Megatron-FSDP / Muon combinations
        findings.append(Finding("error", "mcore-assert", problem.message, line=parsed.lines.get(problem.field)))
    variable = bool(parsed.architecture.get("variable_seq_lengths") or parsed.settings.get("variable_seq_lengths"))
    view = FileView(parsed.settings, parsed.architecture, cfg.model, cfg.parallel.gpus, cfg.mcore_version, parsed.kind)
    hits = tripped(view)
    # Megatron's assertions that moeplan.engine.knobs also makes (McoreAssert.shares_knob), one cause each: the file gets
    # the assertion's finding (its source, its own rule name) with the knob's fix, and none from knob-layout for
    # that field, where the knob fails for no cause but those the assertion tests (else both)
    knob_hits = frozenset(rule.field for rule, _ in hits if rule.shares_knob is not None and rule.shares_knob(cfg))
    fixable, lacks = _writable(cfg)
    if fixable is None:  # no release runs it: a finding (not an unreadable file); no fix can be written after it
        findings.append(Finding("error", "mcore-settings", f"{lacks}; no Megatron-Core release runs this, so the other "
                                "checks wait until it is mended"))
    elif lacks is not None:  # the target release cannot express the run: a finding, not an unreadable file
        releases = {"target": cfg.mcore_version, "first_release": fixable.mcore_version}
        if version_problems:  # the file's values the target lacks are mcore-version errors already: say what follows
            first = version_problems[0]
            findings.append(Finding("info", "mcore-release", f"the other findings and fixes assume Megatron-Core "
                                    f"{fixable.mcore_version}, the first release that accepts the file's values "
                                    f"(mcore-version: {first.field})", numbers=releases,
                                    line=parsed.lines.get(first.field)))
        else:
            findings.append(Finding("error", "mcore-release", f"{lacks}; the other findings and fixes assume "
                                    f"Megatron-Core {fixable.mcore_version}, the first release that can",
                                    numbers=releases))
    if fixable is not None:
        findings += lint(fixable, gpu_spec, headroom=headroom, variable_seq_lengths=variable,
                         unknown=tuple(parsed.unknown), lines={**parsed.lines, **parsed.env_lines}, known=known_keys(parsed.kind), cal=cal,
                         reported_knobs=knob_hits)
    for rule, message in hits:
        fix: tuple[str, ...] = ()
        if rule.id == "hierarchical-cp-missing":  # the split moeplan's exports write: a2a inside the NVLink domain
            inner = hierarchical_cp_inner(cfg.parallel.tp, cfg.parallel.cp, gpu_spec.nvlink_domain)
            fix = (f"model.hierarchical_context_parallel_sizes=[{inner},{cfg.parallel.cp // inner}]",)
        elif rule.field in knob_hits and fixable is not None:
            fix = knob_fix(fixable, rule.field)
        lead = f"{rule.by} rejects this: " if rule.severity == "error" else f"{rule.by}: "
        findings.append(Finding(rule.severity, f"mcore-{rule.id}", lead + message, fix, numbers={"source": rule.source},
                                line=parsed.lines.get(rule.field)))
    if run_mcore:
        findings += _run_mcore(cfg)
    estimate = None
    if not cfg.layout_checks():
        estimate = evaluate(cfg, gpu_spec, cal)
    return CheckResult(cfg, gpu_spec, parsed.kind, sort_findings(findings), estimate,
                       fix_version=None if fixable is None else fixable.mcore_version, file_paths=dict(parsed.paths),
                       cal=cal)


# Files whose warnings are about a config (the rest: import-time notices about this machine, deprecations).
_CONFIG_WARNING_FILES = ("transformer_config.py", "model_parallel_config.py", "optimizer_config.py",
                         "distributed_data_parallel_config.py")


def _run_mcore(cfg: RunConfig) -> list[Finding]:
    """Megatron-Core's TransformerConfig built from the run: its error (a warning when the checks cannot run
    faithfully here, :class:`McoreNotRun`), and the UserWarnings its config checks give for this run as
    information findings (captured, so nothing reaches stderr)."""
    out: list[Finding] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            build_mcore_config(cfg)
        except McoreNotRun as exc:  # not about the config: another release installed, or TE missing where probed
            out.append(Finding("warning", "mcore-not-run", str(exc)))
        except MoeplanError as exc:
            out.append(Finding("error", "mcore", str(exc)))
        defaults = default_config_warnings() if caught else set()
    seen: set[str] = set()
    for w in caught:
        text = " ".join(str(w.message).split())
        if text in seen or text in defaults or not str(w.filename).endswith(_CONFIG_WARNING_FILES):
            continue
        seen.add(text)
        out.append(Finding("info", "mcore-warning", f"Megatron-Core warns: {text}",
                           numbers={"category": w.category.__name__}))
    return out


def estimate_file(path: str, *, model: str | None = None, gpu: str | None = None, gpus: int | None = None,
                  hardware_file: str | None = None, seq_len: int | None = None,
                  cal: Calibration = DEFAULT_CALIBRATION, te_version: str | None = None,
                  mcore_version: str | None = None, moe_imbalance: float | None = None,
                  reserve_gib: float | None = None, te_grouped_tensor: bool = False) -> Estimate:
    """Estimate of a run file (optionally at another sequence length), for `moeplan explain`. GPU and
    versions: the arguments, else the file's '# moeplan:' comment (:func:`load_run`); routing imbalance and
    memory reserve, which no run file says, from the arguments (None: RunConfig's defaults)."""
    cfg, gpu_spec, _ = load_run(path, model=model, gpu=gpu, gpus=gpus, hardware_file=hardware_file,
                                mcore_version=mcore_version, seq_len=seq_len, te_version=te_version,
                                te_grouped_tensor=te_grouped_tensor)
    return evaluate(_with_unsaid(cfg, moe_imbalance, reserve_gib), gpu_spec, cal)


def _with_unsaid(cfg: RunConfig, moe_imbalance: float | None, reserve_gib: float | None) -> RunConfig:
    """``cfg`` with the routing imbalance and memory reserve no run file says (None: keep RunConfig's default)."""
    assumed = {k: v for k, v in (("moe_imbalance", moe_imbalance), ("reserve_gib", reserve_gib)) if v is not None}
    return cfg.with_(**assumed) if assumed else cfg


__all__ = ["CheckResult", "architecture_mismatch", "check", "estimate_file", "infer_model", "load_run", "with_split_layout"]
