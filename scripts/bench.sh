#!/usr/bin/env bash
# Every bench of BENCHMARKS.md in one run, and its tables and plot regenerated from their JSON
# (`make bench`; as root, on a host `scripts/setup.sh all` prepares, as `make test` does):
#
#   1. brokerd alone with a no-op runner (crates/brokerd/examples/overhead.rs): its cost per
#      call, its memory, and its scale rows; and `changes` on a staged layer of 1,000 changed
#      files (crates/brokerd/examples/staged_changes.rs);
#   2. the end-to-end suite's benches on each backend, in the suite's own setup (tests/e2e/run.sh:
#      the service user, the test image, the network namespace): brokerd next to the bare
#      sandbox (--bench) and staged calls next to direct ones with `changes` on a 1,000-file
#      layer (--bench too: staged-<backend>.json), shell calls with shell_hosts next to calls
#      without (--bench too: egress-<backend>.json), calls on a toolset next to calls on the
#      base one and make test in the sandbox and on the host (toolset-<backend>.json), then
#      calls per second and latency at 1
#      to 16 concurrent clients with
#      brokerd's default max_concurrent_calls and with it at the core count (--scale); only the
#      last scenario runs besides (it stops brokerd);
#   3. unless BENCH_PODMAN_CONF=0, the service user's Podman configuration side by side
#      (scripts/bench-podman-conf.sh: 7 variants, BENCH_N `podman run`s each);
#   4. `boxmaker-e2e report`: the JSON in BENCH_OUT as the tables between BENCHMARKS.md's
#      `<!-- bench:NAME -->` markers, and the latency plot docs/bench-scale.svg.
#
# Knobs, from the environment (`make bench BENCH_N=10 ...` passes them on):
#   BENCH_N=40                     calls per tool and side, brokerd next to the bare sandbox
#                                  (and per variant of the Podman configuration bench)
#   BENCH_SCALE_CALLS=64           calls per row of the scale bench (each client makes at least 1)
#   BENCH_SCALE_CLIENTS=1,2,4,8,16 the concurrent clients of its rows
#   BENCH_SCALE_TOOLS=read_file,shell   its tool mix, taken in turns (http_fetch, write_file too)
#   BENCH_OVERHEAD_N=2000          calls per row of the overhead bench and of its scale rows
#   BENCH_PODMAN_CONF=1            0 leaves the Podman configuration bench out
#   BENCH_BACKENDS="podman bwrap"  the backends of step 2
#   BENCH_OUT=build/bench          where the JSON and the runs' logs go (emptied first)
# The JSON stays in BENCH_OUT; `boxmaker-e2e report --dir DIR` prints the tables again.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

n=${BENCH_N:-40}
scale_calls=${BENCH_SCALE_CALLS:-64}
scale_clients=${BENCH_SCALE_CLIENTS:-1,2,4,8,16}
scale_tools=${BENCH_SCALE_TOOLS:-read_file,shell}
overhead_n=${BENCH_OVERHEAD_N:-2000}
podman_conf=${BENCH_PODMAN_CONF:-1}
backends=${BENCH_BACKENDS:-podman bwrap}
out=${BENCH_OUT:-build/bench}
case "$out" in /*) ;; *) out=$repo/$out ;; esac
MUSL=x86_64-unknown-linux-musl
target=${CARGO_TARGET_DIR:-$repo/target}

say() { printf 'bench: %s\n' "$*" >&2; }
for v in "$n" "$scale_calls" "$overhead_n"; do
    case "$v" in '' | *[!0-9]* | 0) say "BENCH_N, BENCH_SCALE_CALLS and BENCH_OVERHEAD_N are numbers of at least 1"; exit 2 ;; esac
done
case "$podman_conf" in 0 | 1) ;; *) say "BENCH_PODMAN_CONF is 0 or 1"; exit 2 ;; esac
[ "$(id -u)" -eq 0 ] || { say "run as root (the end-to-end suite makes a network namespace and the service user)"; exit 2; }

# A JSON string of $1 (quotes and backslashes escaped, control characters dropped).
jstr() { printf '"%s"' "$(printf '%s' "$1" | tr -d '\000-\037' | sed 's/\\/\\\\/g; s/"/\\"/g')"; }

started=$(date +%s)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || commit="$commit+changes"
rm -rf "$out"
install -d "$out"

say "1/4 brokerd alone, no-op runner"
cargo build --release --locked -p brokerd --example overhead --example staged_changes
"$target/release/examples/overhead" "$overhead_n" --scale "$overhead_n" --out "$out" | tee "$out/overhead.log"
"$target/release/examples/staged_changes" 20 --out "$out" | tee "$out/staged-changes.log"

say "2/4 the end-to-end suite's benches on: $backends"
E2E_BACKENDS=$backends tests/e2e/run.sh --only sigterm-stops-cleanly --bench "$n" \
    --scale "$scale_calls" --scale-clients "$scale_clients" --scale-tools "$scale_tools" \
    --bench-out "$out" 2>&1 | tee "$out/e2e.log"

if [ "$podman_conf" = 1 ]; then
    say "3/4 the service user's Podman configuration"
    scripts/bench-podman-conf.sh "$n" --json "$out/podman-conf.json" 2>&1 | tee "$out/podman-conf.log"
else
    say "3/4 the Podman configuration bench is left out (BENCH_PODMAN_CONF=0)"
fi

missing=()
for f in overhead scale-noop changes-noop; do [ -f "$out/$f.json" ] || missing+=("$f.json"); done
for b in $backends; do
    for f in bench staged egress toolset scale; do [ -f "$out/$f-$b.json" ] || missing+=("$f-$b.json"); done
done
if [ "$podman_conf" = 1 ] && [ ! -f "$out/podman-conf.json" ]; then missing+=(podman-conf.json); fi
if [ ${#missing[@]} -gt 0 ]; then
    say "no ${missing[*]} in $out (see the logs there); BENCHMARKS.md is left as it was"
    exit 1
fi

podman_version=$(scripts/as-boxmaker podman version --format '{{.Client.Version}}' 2>/dev/null || echo unknown)
os=$(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-unknown}" || echo unknown)
seconds=$(($(date +%s) - started))
cat >"$out/host.json" <<EOF
{"bench": "host", "date": $(jstr "$(date -u '+%Y-%m-%d %H:%M UTC')"), "commit": $(jstr "$commit"),
 "os": $(jstr "$os"), "kernel": $(jstr "$(uname -r)"), "cores": $(nproc), "podman": $(jstr "$podman_version"),
 "load_before": $(jstr "$load_before"), "load_after": $(jstr "$(cut -d' ' -f1-3 /proc/loadavg)"),
 "seconds": $seconds,
 "knobs": {"BENCH_N": $n, "BENCH_SCALE_CALLS": $scale_calls, "BENCH_SCALE_CLIENTS": $(jstr "$scale_clients"),
           "BENCH_SCALE_TOOLS": $(jstr "$scale_tools"), "BENCH_OVERHEAD_N": $overhead_n,
           "BENCH_PODMAN_CONF": $podman_conf}}
EOF

say "4/4 BENCHMARKS.md and docs/bench-scale.svg from $out"
"$target/$MUSL/release/boxmaker-e2e" report --dir "$out" --markdown BENCHMARKS.md --svg docs/bench-scale.svg
say "done in $((seconds / 60)) min $((seconds % 60)) s"
