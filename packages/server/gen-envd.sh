#!/bin/sh
# Regenerates the TypeScript of E2B's envd protocol (src/gateway/envd/gen) from proto/. Run by hand after
# editing a .proto; the generated files are committed and the build never runs this.
set -eu
cd "$(dirname "$0")"
root=$(cd ../.. && pwd)
PATH="$root/node_modules/.bin:$PATH" buf generate
