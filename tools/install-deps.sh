#!/bin/sh
# Installs the Debian/Ubuntu packages Nabla needs to build and test, and only
# the ones that are missing.  Quiet when everything is already installed.
# Uses apt-get (as root, or through sudo).  `apt-get update` runs only when
# something has to be installed.  Packages unknown to this distribution are
# skipped with a note instead of failing.
set -eu

PKGS="build-essential pkg-config meson ninja-build clang libclang-rt-14-dev
libreadline-dev libzmq3-dev libjansson-dev libssl-dev libopenblas-dev libopenblas-openmp-dev libsleef-dev libdnnl-dev libkissfft-dev
libpng-dev zlib1g-dev tmux python3 python3-numpy python3-torch python3-sklearn
python3-jupyter-client python3-nbclient python3-jupyter-kernel-test
jupyter-console python3-ipykernel jupyter-nbconvert jupyter-notebook
openssh-server openssh-client slurm-wlm munge chromium python3-websocket
iproute2 util-linux lua5.4 ccache"

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

SUDO=""
as_root() {  # runs apt-get as root: directly, through sudo, or explains and fails
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
      echo "install-deps: missing packages:$missing" >&2
      echo "install-deps: not root and no sudo; install them by hand" >&2
      exit 1
    fi
  fi
  $SUDO env DEBIAN_FRONTEND=noninteractive "$@"
}

export DEBIAN_FRONTEND=noninteractive
apt_update() { as_root apt-get update -qq; }
updated=0
# No package index at all (fresh container): fetch it before deciding.
if ! ls /var/lib/apt/lists/*_Packages* >/dev/null 2>&1; then
  apt_update; updated=1
fi

# Drop names this distribution does not know (other releases name some differently).
has_candidate() {
  apt-cache policy "$1" 2>/dev/null | sed -n 's/^ *Candidate: //p' | grep -qv '(none)'
}
avail=""
for p in $missing; do
  if has_candidate "$p"; then
    avail="$avail $p"
  else
    echo "install-deps: note: package '$p' is not available on this system; skipped" >&2
  fi
done
[ -z "$avail" ] && exit 0

echo "install-deps: installing:$avail"
[ "$updated" = 1 ] || apt_update
as_root apt-get install -y -qq --no-install-recommends $avail
