#!/usr/bin/env bash
# Checks, and where it can installs, the system packages the tests run for real beside Go:
#   PostgreSQL (the production-shaped Temporal cluster), Python 3.9+ (client_lib's tests), Debian's
#   python3-jupyter-server (the idle-notebook tests) and Debian's chromium (the dashboard's browser test).
# As root, or with password-less sudo, and apt-get on the machine, it installs what is missing in one
# apt-get call (about two minutes the first time); otherwise it says in one line what is missing and
# how to get it, and fails. `make test` and .ci/run both run it; nothing is installed when all is there.
set -euo pipefail

missing=()
have_postgres() { ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || command -v postgres >/dev/null 2>&1; }
have_python() { python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null; }
have_jupyter() { /usr/bin/python3 -c 'import jupyter_server' 2>/dev/null || python3 -c 'import jupyter_server' 2>/dev/null; }
have_chromium() { [ -x /usr/bin/chromium ] || command -v chromium >/dev/null 2>&1; }

check() {
  missing=()
  have_postgres || missing+=(postgresql)
  have_python || missing+=(python3)
  have_jupyter || missing+=(python3-jupyter-server)
  have_chromium || missing+=(chromium)
}

check
if [ ${#missing[@]} -eq 0 ]; then
  echo "test-deps: PostgreSQL, Python $(python3 -c 'import platform; print(platform.python_version())'), Jupyter server, Chromium: present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if sudo -n true 2>/dev/null; then sudo=sudo; else sudo=none; fi
fi
if [ "$sudo" = none ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "test-deps: make test needs ${missing[*]}: install them (Debian: sudo apt-get install -y ${missing[*]}) and run it again" >&2
  exit 1
fi

echo "test-deps: installing ${missing[*]} with apt-get (once, about two minutes) ..."
start=$SECONDS
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq "${missing[@]}" >/dev/null
check
if [ ${#missing[@]} -gt 0 ]; then
  echo "test-deps: still missing after apt-get install: ${missing[*]}" >&2
  exit 1
fi
echo "test-deps: installed in $((SECONDS - start))s"
