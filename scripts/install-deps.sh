#!/usr/bin/env bash
# Install what building, testing and benchmarking embcache needs on Debian/Ubuntu.
#
# Idempotent: only packages that dpkg does not report as installed are installed, and
# `apt-get update` runs only when something is missing. Uses sudo only when not root and
# sudo exists. Then makes sure `python3 -c 'import numpy, matplotlib'` works (pip first; on a
# PEP 668 "externally managed" interpreter: apt's python3-numpy / python3-matplotlib for
# Debian's own python3, else pip --break-system-packages).
#
# Environment:
#   EMC_DEPS_PACKAGES  override the apt package list (space separated)
#   EMC_SKIP_NUMPY=1   do not check/install the Python modules (numpy, matplotlib)
#   PYTHON             interpreter to provision with them (default: python3)
set -euo pipefail

PYTHON="${PYTHON:-python3}"
DEFAULT_PACKAGES="build-essential cmake pkg-config check libsubunit-dev libjemalloc-dev \
libxxhash-dev clang libclang-rt-14-dev python3 python3-pip"
read -r -a PACKAGES <<<"${EMC_DEPS_PACKAGES:-$DEFAULT_PACKAGES}"

log() { printf '[install-deps] %s\n' "$*"; }
die() { printf '[install-deps] ERROR: %s\n' "$*" >&2; exit 1; }

# ------------------------------------------------------------------ privileges
SUDO=()
if [[ "$(id -u)" -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
    # No stdin in CI: never hang on a password prompt.
    if [[ ! -t 0 ]] || [[ "${CI:-}" == "true" ]]; then SUDO=(sudo -n); fi
  fi
fi
can_install() { [[ "$(id -u)" -eq 0 || ${#SUDO[@]} -gt 0 ]]; }

# ------------------------------------------------------------------ apt packages
is_installed() {
  # "install ok installed" is the only state that means the files are there.
  [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == "install ok installed" ]]
}

apt_install() {  # apt_install PKG...: update (once) then install
  local apt_opts=(-o Acquire::Retries=3 -o DPkg::Lock::Timeout=300)
  export DEBIAN_FRONTEND=noninteractive
  if [[ -z "${_EMC_APT_UPDATED:-}" ]]; then
    log "apt-get update"
    "${SUDO[@]}" apt-get "${apt_opts[@]}" update -q
    _EMC_APT_UPDATED=1
  fi
  log "apt-get install $*"
  "${SUDO[@]}" apt-get "${apt_opts[@]}" install -y -q --no-install-recommends "$@"
}

if command -v dpkg-query >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  missing=()
  for p in "${PACKAGES[@]}"; do
    is_installed "$p" || missing+=("$p")
  done
  if [[ ${#missing[@]} -eq 0 ]]; then
    log "apt packages: all ${#PACKAGES[@]} present"
  else
    log "apt packages missing: ${missing[*]}"
    can_install || die "not root and no sudo: install these as root: ${missing[*]}"
    apt_install "${missing[@]}"
    for p in "${missing[@]}"; do
      is_installed "$p" || die "package $p still not installed"
    done
  fi
else
  log "WARNING: no dpkg/apt-get here (not Debian/Ubuntu); checking tools only"
  for t in cc cmake pkg-config clang "$PYTHON"; do
    command -v "$t" >/dev/null 2>&1 || die "missing tool: $t (install it with your package manager)"
  done
  for m in jemalloc check; do
    pkg-config --exists "$m" || die "pkg-config cannot find $m (install its -dev package)"
  done
fi

# ------------------------------------------------------------------ Python modules
# numpy (the Python binding, its tests and example) and matplotlib (emc-bench --plot).
if [[ "${EMC_SKIP_NUMPY:-0}" == "1" ]]; then
  log "python modules: skipped (EMC_SKIP_NUMPY=1)"
  exit 0
fi
command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found"

py_real="$(readlink -f "$(command -v "$PYTHON")")"
# Debian's own interpreter lives in /usr/bin; apt's python3-<module> is importable there.
is_system_python=0
[[ "$py_real" == /usr/bin/python3* ]] && is_system_python=1

pip_log="$(mktemp)"
trap 'rm -f "$pip_log"' EXIT
pip_opts=(--disable-pip-version-check --no-input -q)
[[ "$(id -u)" -eq 0 ]] && pip_opts+=(--root-user-action=ignore)

have_module() { "$PYTHON" -c "import $1" >/dev/null 2>&1; }

# ensure_module MODULE APT_PACKAGE: pip first; on a PEP 668 "externally managed" interpreter
# apt's package for Debian's own python3, else pip --break-system-packages; ensurepip when
# the interpreter has no pip at all.
ensure_module() {
  local mod=$1 apt_pkg=$2
  if have_module "$mod"; then
    log "$mod: present ($("$PYTHON" -c "import $mod; print($mod.__version__)") for $py_real)"
    return 0
  fi
  log "$mod: missing for $py_real; trying: $PYTHON -m pip install $mod"
  if "$PYTHON" -m pip install "${pip_opts[@]}" "$mod" >"$pip_log" 2>&1 && have_module "$mod"; then
    log "$mod: installed with pip"
    return 0
  fi
  sed 's/^/  pip: /' "$pip_log" | tail -n 15 >&2
  if [[ $is_system_python -eq 1 ]] && command -v apt-get >/dev/null 2>&1 && can_install; then
    log "$mod: falling back to apt $apt_pkg (Debian's python3)"
    if apt_install "$apt_pkg" && have_module "$mod"; then
      log "$mod: installed with apt"
      return 0
    fi
  fi
  if grep -qi 'externally-managed' "$pip_log"; then
    log "$mod: falling back to pip --break-system-packages"
    if "$PYTHON" -m pip install "${pip_opts[@]}" --break-system-packages "$mod" && have_module "$mod"; then
      log "$mod: installed with pip --break-system-packages"
      return 0
    fi
  fi
  if ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
    log "$mod: $PYTHON has no pip; trying ensurepip"
    if "$PYTHON" -m ensurepip --upgrade >/dev/null 2>&1 \
       && "$PYTHON" -m pip install "${pip_opts[@]}" "$mod" && have_module "$mod"; then
      log "$mod: installed with pip (after ensurepip)"
      return 0
    fi
  fi
  die "could not make 'import $mod' work for $py_real"
}

ensure_module numpy python3-numpy
ensure_module matplotlib python3-matplotlib
