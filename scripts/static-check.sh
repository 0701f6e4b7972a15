#!/usr/bin/env bash
# The toolkit runs inside images that have no C library: prove the release build is static
# (no INTERP program header, no NEEDED entry) and print its size.
set -euo pipefail
bin=${1:-target/x86_64-unknown-linux-musl/release/toolkit}
if readelf -lW "$bin" | grep -q INTERP; then
    echo "static-check: $bin has a program interpreter (INTERP): it is not static" >&2
    exit 1
fi
if readelf -dW "$bin" 2>/dev/null | grep -q NEEDED; then
    echo "static-check: $bin names shared libraries (NEEDED): it is not static" >&2
    exit 1
fi
echo "static-check: $bin is static, $(stat -c %s "$bin") bytes"
