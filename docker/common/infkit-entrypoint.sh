#!/bin/sh
# Entry point of the infkit role images: run the harness mounted read-only at
# $INFKIT_HOME (default /opt/infkit). The image never contains the harness itself.
set -eu
home=${INFKIT_HOME:-/opt/infkit}
if [ ! -f "$home/harness/__init__.py" ]; then
  echo "infkit: the harness is not mounted at $home (run with: -v \"\$PWD:$home:ro\")" >&2
  exit 2
fi
exec python3 -m harness "$@"
