#!/usr/bin/env bash
# Installs what building and testing need, and prints the venv's path.
#
#   venv=$(bash tools/setup_env.sh)
#
# - Debian packages (cmake, ninja, g++, GoogleTest, python3-venv, and
#   simdjson, which is optional) via apt-get when running as root and
#   something is missing; otherwise names them.
# - A venv with requirements.txt's exact pins, cached outside the clone and
#   keyed by that file's hash and the Python version, so a repeat run with the
#   same pins downloads nothing. $AUTOGRAD_DEVICE_LOGGING_CACHE moves the cache;
#   $AUTOGRAD_DEVICE_LOGGING_REQUIREMENTS names another requirements file (the
#   benchmark's upstream-torch venv).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log() { echo "[setup] $*" >&2; }

missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja-build)
command -v g++ >/dev/null || missing+=(g++)
command -v python3 >/dev/null || missing+=(python3)
[ -f /usr/include/gtest/gtest.h ] || [ -f /usr/src/googletest/CMakeLists.txt ] || missing+=(libgtest-dev)
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing ${missing[*]} with apt-get"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
  else
    log "missing: ${missing[*]}; install them (Debian: apt-get install ${missing[*]})"
    exit 1
  fi
fi
# Optional: simdjson and zlib, for the fleet report's compiled reading
# (Note [The pairs' values in compiled code], record_decoder.py; Note
# [Keeping a chunk's records in compiled code], record_decoding.cpp).
# Without them the report reads the same, slower, so a failed install (a
# machine without a package mirror) is only said.
optional=()
[ -f /usr/include/simdjson.h ] || optional+=(libsimdjson-dev)
[ -f /usr/include/zlib.h ] || optional+=(zlib1g-dev)
if [ ${#optional[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing ${optional[*]} with apt-get"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${optional[@]}"; } >&2 ||
      log "could not install ${optional[*]}: the fleet report decodes records in Python"
  else
    log "optional: ${optional[*]} (Debian: apt-get install ${optional[*]}) speeds up the fleet report"
  fi
fi

pyver=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
requirements=${AUTOGRAD_DEVICE_LOGGING_REQUIREMENTS:-$repo/requirements.txt}
key=$(sha256sum "$requirements" | cut -c1-12)
cache=${AUTOGRAD_DEVICE_LOGGING_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/autograd_device_logging}
venv="$cache/venv-py$pyver-$key"
if [ ! -f "$venv/.complete" ]; then
  log "creating $venv (first run with these pins downloads torch)"
  rm -rf "$venv"
  mkdir -p "$cache"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    -r "$requirements" >&2
  touch "$venv/.complete"
else
  log "using cached $venv"
fi
echo "$venv"
