#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 30). Installs cargo-fuzz if missing.
# libFuzzer needs -Zsanitizer flags: on a stable toolchain RUSTC_BOOTSTRAP=1 enables them.
# Usage: fuzz/run.sh [SECONDS]   (exit status non-zero if any target finds a crash)
set -euo pipefail
secs="${1:-30}"
cd "$(dirname "$0")"
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
if ! rustc --version | grep -q nightly; then
    export RUSTC_BOOTSTRAP=1
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
status=0
for target in $(cargo fuzz list); do
    echo "== fuzz $target for ${secs}s"
    mkdir -p "corpus/$target"
    if ! cargo fuzz run "$target" "corpus/$target" -- -max_total_time="$secs" -rss_limit_mb=2048; then
        echo "!! $target found a crash: see fuzz/artifacts/$target/"
        status=1
    fi
done
exit "$status"
