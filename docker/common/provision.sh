#!/bin/sh
# Shared build step of every infkit role image: install a hash-locked requirements
# file and create the unprivileged user. Usage:
#   provision.sh LOCK venv DIR      new virtualenv at DIR (CPU roles on Debian's Python)
#   provision.sh LOCK system        into the base's own Python (torch roles: base keeps torch)
#   provision.sh LOCK tail DIR      into DIR, put at the END of sys.path (server roles: the
#                                   engine's own packages always win)
# A proxy CA may arrive as the build secret `cabundle`; it is used, never copied.
# A wheelhouse (the build context `wheelhouse`, mounted at $WHEELHOUSE) holding the
# locked wheels replaces the indexes: pip then installs from it alone, hashes checked.
set -eu
lock=$1 mode=$2 dir=${3:-}
wheelhouse=${WHEELHOUSE:-/wheelhouse}
if [ -s /run/secrets/cabundle ]; then export PIP_CERT=/run/secrets/cabundle; fi
if ls "$wheelhouse"/*.whl >/dev/null 2>&1; then
  echo "provision.sh: installing from the wheelhouse ($(ls "$wheelhouse"/*.whl | wc -l) wheels)"
  set -- --no-index --find-links "$wheelhouse"
  unset PIP_EXTRA_INDEX_URL
else
  set --
fi
pip_install() {  # PYTHON [more pip install options]
  py=$1
  shift
  "$py" -m pip install --no-cache-dir --disable-pip-version-check --no-deps --only-binary=:all: \
    --require-hashes -r "$lock" "$@"
}
case "$mode" in
  venv)
    python3 -m venv "$dir"
    pip_install "$dir/bin/python" "$@" ${PIP_EXTRA_INDEX_URL:+--extra-index-url "$PIP_EXTRA_INDEX_URL"} ;;
  system)
    pip_install python3 "$@" ;;
  tail)
    pip_install python3 "$@" --target "$dir"
    echo "$dir" > "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz-infkit-deps.pth" ;;
  *)
    echo "provision.sh: unknown mode $mode" >&2
    exit 2 ;;
esac
useradd --uid 10001 --create-home --shell /usr/sbin/nologin infkit
mkdir -p /opt/infkit /work
chown infkit:infkit /work
