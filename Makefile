# boxmaker: the README's two commands are `make demo` and `make test`.
SHELL := /bin/bash
MUSL := x86_64-unknown-linux-musl
TOOLKIT := target/$(MUSL)/release/toolkit

.PHONY: demo test check unit static-check toolchain fmt-check clippy nix-check nix-sandbox-check guest-test e2e mcp-test bench bench-podman-conf

toolchain:
	scripts/setup.sh toolchain

$(TOOLKIT): toolchain
	cargo build --release --locked --target $(MUSL) -p toolkit

static-check: $(TOOLKIT)
	scripts/static-check.sh $(TOOLKIT)

unit: toolchain
	cargo test --workspace --locked

fmt-check:
	cargo fmt --all -- --check

# The workspace lints (Cargo.toml [workspace.lints], clippy.toml), every target, warnings denied.
clippy: toolchain
	cargo clippy --workspace --all-targets --locked -- -D warnings

# The Nix side without a Nix build (nixos/checks/nix-check.sh; NIXPKGS_LIB adds the module's
# evaluation).
nix-check:
	nixos/checks/nix-check.sh

# The package's check phase (checks.crate-tests) as Nix's build sandbox runs it, reproduced
# with bubblewrap (nixos/checks/nix-sandbox-check.sh, as root): no network, no /bin/bash, only
# the package's source set and vendored crates, HOME=/homeless-shelter, an unprivileged user.
nix-sandbox-check: toolchain
	nixos/checks/nix-sandbox-check.sh

# The QEMU guest (vm-tests/guest/run.sh, as root): systemd, cgroup v2 and the limits enforced,
# brokerd from dist/systemd/, then a smoke pass of the scenario suite on each backend; the
# checks are `boxmaker-e2e guest`. Its builds are those of tests/e2e/run.sh, the same packages
# in each cargo build, so after `make e2e` they compile nothing.
guest-test: $(TOOLKIT)
	cargo build --release --locked -p brokerd -p boxctl
	cargo build --release --locked --target $(MUSL) -p boxmaker-e2e
	vm-tests/guest/run.sh

# The end-to-end scenario suite (tests/e2e/run.sh, as root): real brokerd, real rootless
# Podman, the suite's own hosts in a network namespace it makes and removes.
e2e: toolchain
	tests/e2e/run.sh

# `boxctl mcp` driven by the official Python MCP SDK (tests/mcp/run.sh, as root): a real
# brokerd on bwrap, in a network namespace with only lo; the SDK pinned in a venv in
# /var/cache/boxmaker-mcp.
mcp-test: toolchain
	tests/mcp/run.sh

# The loop of a working day: formatting, lints and the unit and integration tests (no root
# needed for most; what needs root or a kernel feature says it skipped), among them the
# repository's own lints (crates/repo-lints: no source file over 1,000 lines, the runbook's
# anchors, the design's headings, unsafe code forbidden outside the sandbox crate).
check: fmt-check clippy unit

# The whole suite, as CI runs it. The package's check phase runs beside the guest, at nice 10:
# the two share nothing and QEMU leaves part of the cores idle (scripts/beside.sh). Each is
# its own target above too.
test: fmt-check clippy static-check unit nix-check e2e mcp-test
	scripts/beside.sh nix-sandbox-check nixos/checks/nix-sandbox-check.sh \
		$(MAKE) --no-print-directory guest-test

demo: $(TOOLKIT)
	scripts/demo.sh

# Every bench of BENCHMARKS.md (scripts/bench.sh, as root): its tables rewritten between their
# markers, docs/bench-scale.svg, and the JSON in build/bench/. Knobs: BENCH_N (40),
# BENCH_SCALE_CALLS (64), BENCH_SCALE_CLIENTS (1,2,4,8,16), BENCH_SCALE_TOOLS (read_file,shell),
# BENCH_OVERHEAD_N (2000), BENCH_PODMAN_CONF (1; 0 leaves the Podman configuration bench out),
# BENCH_BACKENDS ("podman bwrap"), e.g. `make bench BENCH_N=10 BENCH_PODMAN_CONF=0`.
BENCH_KNOBS := BENCH_N BENCH_SCALE_CALLS BENCH_SCALE_CLIENTS BENCH_SCALE_TOOLS BENCH_OVERHEAD_N \
	BENCH_PODMAN_CONF BENCH_BACKENDS BENCH_OUT
export $(BENCH_KNOBS)
bench: $(TOOLKIT)
	scripts/bench.sh

# The service user's Podman configuration, each choice side by side (BENCHMARKS.md).
bench-podman-conf: $(TOOLKIT)
	scripts/setup.sh all
	scripts/bench-podman-conf.sh 40 --json build/bench-podman-conf.json
