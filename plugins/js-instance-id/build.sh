#!/bin/sh
# Builds the JavaScript instance-id policy into a component with ComponentizeJS
# (npm package @bytecodealliance/componentize-js; tested with 0.23.0).
# Output: $1, default target/js_instance_id.wasm (about 12 MB: it embeds the
# StarlingMonkey JS engine, so it is built, not committed).
#
# Finds `componentize-js` on PATH, else in ./node_modules/.bin (`npm ci`
# here installs it from package-lock.json; `scripts/ops-tools componentize-js`
# does that when it is missing). package.json names preview2-shim 0.25.0
# because componentize-js 0.23.0 imports it without depending on it; a
# fresh install only found it by chance of hoisting.
# WASI features the policy does not use are disabled so the component
# imports nothing chitin's sandbox lacks.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/target/js_instance_id.wasm}
case $out in /*) ;; *) out=$(pwd)/$out ;; esac
mkdir -p "$(dirname "$out")"
tool=$(command -v componentize-js || echo "$here/node_modules/.bin/componentize-js")
cd "$here"
# The WIT must lie under the working directory (the tool's WASI sandbox).
rm -rf target/wit && mkdir -p target && cp -r ../../wit/since_v0.1.0 target/wit
"$tool" --wit target/wit --world-name instance-id-policy \
  -d http fetch-event stdio clocks random -o "$out" app.js
echo "built $out"
