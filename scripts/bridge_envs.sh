#!/usr/bin/env bash
# The interpreters the Megatron Bridge contract tests (tests/contract/test_bridge_contract.py) run in:
# one virtual environment per (Bridge, Megatron-Core, Python) triple, kept OUTSIDE the clone in
# ${MOEPLAN_ENV_CACHE:-$HOME/.cache/moeplan}/<key>/ so a machine builds each once and later runs reuse it.
#
#   bash scripts/bridge_envs.sh          build what is missing (idempotent; a finished env is left alone)
#   bash scripts/bridge_envs.sh --list   print "KEY<TAB>ENV_PYTHON<TAB>BASE_PYTHON" per env, build nothing
#                                        (BASE_PYTHON is "-" where no interpreter of that version is found)
#
# A finished env has a stamp file holding its requirement list; an env whose stamp differs (an
# interrupted build, a changed pin) is removed and built again. Bridge is installed without its
# dependency tree (Transformer Engine, flash-attention, wandb, mlflow, ... need a GPU or are not used by
# recipes / ConfigContainer.validate()); only what the recipe and validation path imports is added.
# Where no CPU build of torch exists for the Python version (PyPI has none for cp312 on x86_64) the
# CUDA build is installed; its import needs the nvidia-* libraries, not a GPU.
set -euo pipefail
CACHE=${MOEPLAN_ENV_CACHE:-$HOME/.cache/moeplan}

# key | python version | requirement list (one pip install; pins are the contract)
ENVS=(
  "bridge-0.3.1-mcore-0.16.1-py3.11|3.11|torch==2.13.0 megatron-core==0.16.1 megatron-bridge==0.3.1"
  "bridge-0.6.2-mcore-0.19.2-py3.12|3.12|torch==2.14.1 megatron-core==0.19.2 megatron-bridge==0.6.2"
)
# What importing Bridge's recipes, ConfigContainer and the override utilities needs (found by importing
# them; the rest of Bridge's Requires-Dist is left out, see above), pinned as Bridge's metadata pins
# them. Per Bridge minor version. megatron-energon and nvidia-modelopt are Megatron-Core's [mlm] / [dev]
# extras that Bridge's recipe package imports at module level (VLM data modules, checkpointing).
EXTRA_0_3=("transformers<5.0.0" "datasets>=2.20.0" "megatron-energon" "omegaconf>=2.3.0" "hydra-core>1.3,<=1.3.2"
           "einops" "rich" "pyyaml>=6.0.2" "tqdm>=4.67.1" "regex>=2024.11.6" "six>=1.17.0" "packaging")
EXTRA_0_6=("transformers>=5.8,<=5.12.1" "datasets>=2.20.0" "megatron-energon" "nvidia-modelopt" "tensorboard>=2.19.0"
           "diffusers>=0.36.0" "omegaconf>=2.3.0" "hydra-core>=1.3.4,<1.4" "einops" "rich" "pyyaml>=6.0.2"
           "tqdm>=4.67.1" "regex>=2024.11.6" "six>=1.17.0" "packaging")

find_python() {  # $1 = "3.12": an interpreter of that version, or nothing
  local v=$1 cand
  local var="MOEPLAN_PY${v/./}"
  for cand in "${!var:-}" "$(command -v "python$v" 2>/dev/null || true)" \
      "$(command -v python3 2>/dev/null || true)" \
      $( (pyenv root 2>/dev/null || echo "$HOME/.pyenv") | sed "s|\$|/versions/$v*/bin/python|") ; do
    for c in $cand; do
      [ -n "$c" ] && [ -x "$c" ] || continue
      if [ "$("$c" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$v" ]; then
        echo "$c"; return 0
      fi
    done
  done
  return 0
}

extras_for() {  # $1 = requirement list: the extra packages for its Bridge version
  case "$1" in
    *megatron-bridge==0.3.*) echo "${EXTRA_0_3[*]}" ;;
    *megatron-bridge==0.6.*) echo "${EXTRA_0_6[*]}" ;;
    *) echo "unknown Bridge version in: $1" >&2; return 1 ;;
  esac
}

build() {  # $1 key, $2 python version, $3 requirement list
  local key=$1 ver=$2 reqs=$3 dir="$CACHE/$1" base stamp want
  base=$(find_python "$ver")
  if [ -z "$base" ]; then
    echo "bridge_envs: no Python $ver found (set MOEPLAN_PY${ver/./}); $key not built" >&2
    return 0
  fi
  want="$reqs | $(extras_for "$reqs") | $("$base" -c 'import sys; print(sys.version.split()[0])')"
  stamp="$dir/.moeplan-ready"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return 0
  fi
  echo "bridge_envs: building $key in $dir (once per machine)" >&2
  local t0=$SECONDS
  rm -rf "$dir"
  "$base" -m venv "$dir"
  local pip=("$dir/bin/python" -m pip install -q --disable-pip-version-check --no-warn-conflicts)
  # torch and Megatron-Core with their own dependencies; Bridge alone; then Bridge's import needs.
  # shellcheck disable=SC2086
  "${pip[@]}" $(echo "$reqs" | tr ' ' '\n' | grep -v '^megatron-bridge')
  # shellcheck disable=SC2086
  "${pip[@]}" --no-deps $(echo "$reqs" | tr ' ' '\n' | grep '^megatron-bridge')
  local extra
  read -r -a extra <<< "$(extras_for "$reqs")"
  "${pip[@]}" "${extra[@]}"
  echo "$want" > "$stamp"
  echo "bridge_envs: $key built in $((SECONDS - t0)) s" >&2
}

if [ "${1:-}" = "--list" ]; then
  for e in "${ENVS[@]}"; do
    IFS='|' read -r key ver reqs <<< "$e"
    base=$(find_python "$ver")
    printf '%s\t%s\t%s\n' "$key" "$CACHE/$key/bin/python" "${base:--}"
  done
  exit 0
fi

mkdir -p "$CACHE"
exec 9> "$CACHE/.bridge_envs.lock"
flock 9  # two test runs on one machine build an env once
for e in "${ENVS[@]}"; do
  IFS='|' read -r key ver reqs <<< "$e"
  build "$key" "$ver" "$reqs"
done
