#!/bin/sh
# Builds the Python split policy into a component with componentize-py
# (`pip install componentize-py==0.25.1`, the version it is tested with;
# `scripts/ops-tools componentize-py` installs it). Output: the path given
# as $1, default target/py_load_split.wasm (about 18 MB: it embeds CPython,
# so it is built, not committed).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/target/py_load_split.wasm}
mkdir -p "$(dirname "$out")"
cd "$here"
componentize-py -d ../../wit/since_v0.1.0 -w split-policy componentize app -o "$out"
echo "built $out"
