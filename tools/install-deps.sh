#!/bin/sh
# Installs the Debian/Ubuntu packages Nabla needs to build and test, and only
# the ones that are missing.  Quiet when everything is already installed.
# Uses apt-get (as root, or through sudo).  `apt-get update` runs only when
# something has to be installed.  Packages unknown to this distribution are
# skipped with a note instead of failing.
set -eu

PKGS="build-essential pkg-config meson ninja-build clang libclang-rt-14-dev
libreadline-dev libzmq3-dev libjansson-dev libssl-dev libopenblas-dev
libpng-dev zlib1g-dev tmux python3 python3-numpy python3-torch python3-sklearn
python3-jupyter-client python3-nbclient python3-jupyter-kernel-test"

installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'ok installed'
}

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: not a Debian/Ubuntu system (no dpkg/apt-get); install these by hand:" >&2
  echo "  $(echo $PKGS)" >&2
  exit 0
fi

missing=""
for p in $PKGS; do
  installed "$p" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
  SUDO=""
elif command -v sudo >/dev/null 2>&1; then
  SUDO="sudo"
else
  echo "install-deps: missing packages:$missing" >&2
  echo "install-deps: not root and no sudo; install them by hand" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
echo "install-deps: installing:$missing"
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq

# Drop names this distribution does not know (e.g. older/newer releases).
avail=""
for p in $missing; do
  if apt-cache show "$p" >/dev/null 2>&1 && \
     [ -n "$(apt-cache policy "$p" | sed -n 's/^ *Candidate: //p' | grep -v '(none)')" ]; then
    avail="$avail $p"
  else
    echo "install-deps: note: package '$p' is not available here; skipped" >&2
  fi
done
[ -z "$avail" ] && exit 0

$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $avail
