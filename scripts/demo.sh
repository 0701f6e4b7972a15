#!/usr/bin/env bash
# `make demo`: boxmaker for real on a fresh Debian 12 machine (as root). Installs what is
# missing, builds, makes the tools image and the service user, starts brokerd as that user with
# an example config, runs a short scripted session through boxctl (each tool, a refusal, an ask
# and its approval, protected files held by the mount table, a staged grant whose destructive
# command is read, partly committed and partly discarded by the owner, a toolset with git, make
# and gcc from Debian's packages on which a C project's failing test is fixed in a staged grant
# and the owner commits the fix alone,
# each step checked: the demo fails if the host's files are not what the step shows), shows the
# audit records, stops brokerd with SIGTERM and checks that no container is left.
#
# No network is used by the session: http_fetch is shown only as a refusal (a host outside the
# grant), which brokerd decides before anything runs. The end-to-end suite (make e2e) fetches
# from its own hosts inside a network namespace.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
MUSL=x86_64-unknown-linux-musl
demo=/srv/boxmaker-demo
state=/var/lib/boxmaker/demo
sock_dir=/run/boxmaker-demo
socket=$sock_dir/broker.sock
brokerd_pid=""

[ "$(id -u)" -eq 0 ] || { echo "demo: run as root (it installs packages and makes the service user)" >&2; exit 2; }
export PATH="$HOME/.cargo/bin:$PATH"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
show() { printf '$ %s\n' "$*"; }
fail() { echo "demo: $*" >&2; exit 1; }

stop_brokerd() {
    if [ -n "$brokerd_pid" ] && kill -0 "$brokerd_pid" 2>/dev/null; then
        kill -TERM "$brokerd_pid"
        wait "$brokerd_pid" || true
    fi
    brokerd_pid=""
}
trap stop_brokerd EXIT

step "setup: packages, Rust's musl target, the service user boxmaker"
scripts/setup.sh all

step "build: brokerd and boxctl, the static toolkit"
cargo build --release --locked -p brokerd -p boxctl
cargo build --release --locked --target $MUSL -p toolkit
scripts/static-check.sh target/$MUSL/release/toolkit

step "the tools image, in boxmaker's rootless Podman"
image=$(images/build-tools-image.sh | tail -n 1)
echo "image $image"

step "a toolset from Debian's packages: git, make and gcc (about a minute the first time)"
toolset_tree=$repo/build/toolset-dev
toolset_image=$(images/build-toolset.sh --out "$toolset_tree" dev make git gcc libc6-dev |
    sed -n 's/^image = "\(.*\)"$/\1/p')
[ -n "$toolset_image" ] || { echo "demo: the toolset was not built" >&2; exit 1; }
echo "toolset dev: image $toolset_image, tree $toolset_tree"

step "an example config: $state/brokerd.toml"
install -d -m 0755 "$demo" "$demo/ref"
install -d -o boxmaker -g boxmaker -m 0755 "$demo/notes"
rm -rf "$demo/project"
install -d -o boxmaker -g boxmaker -m 0755 "$demo/project" "$demo/project/src" "$demo/notes/vendor"
printf '# project\n\nA staged grant: what the agent changes waits for the owner.\n' >"$demo/project/README.md"
printf 'int main(void) { return 0; }\n' >"$demo/project/src/main.c"
printf 'TODO: tests\n' >"$demo/project/TODO"
printf 'int vendored;\n' >"$demo/notes/vendor/lib.c"
chown -R boxmaker:boxmaker "$demo/project" "$demo/notes/vendor"
# A C project with a failing test, in a git repository (this host's git, none of its config):
# `make test` wants 2 + 3 from build/sum and gets 2 - 3.
rm -rf "$demo/app"
install -d -m 0755 "$demo/app"
printf 'test: build/sum\n\t./build/sum 2 3 | grep -qx 5\n\t@echo test passed\n\nbuild/sum: sum.c\n\tmkdir -p build && cc -O0 -o build/sum sum.c\n' \
    >"$demo/app/Makefile"
sum_c() {
    printf '#include <stdio.h>\n#include <stdlib.h>\n\nint main(int argc, char **argv)\n{\n'
    printf '\tif (argc != 3)\n\t\treturn 2;\n\tprintf("%%d\\n", atoi(argv[1]) %s atoi(argv[2]));\n\treturn 0;\n}\n' "$1"
}
sum_c - >"$demo/app/sum.c"
(
    export HOME=$demo/app GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=demo GIT_COMMITTER_NAME=demo \
        GIT_AUTHOR_EMAIL=demo@example.org GIT_COMMITTER_EMAIL=demo@example.org
    git -c init.defaultBranch=main init -q "$demo/app"
    git -C "$demo/app" add Makefile sum.c
    git -C "$demo/app" commit -q -m "sum: add two numbers"
)
chown -R boxmaker:boxmaker "$demo/app"
install -d -o boxmaker -g boxmaker -m 0750 "$state"
install -d -o boxmaker -g root -m 0750 "$sock_dir"
printf 'boxmaker runs every tool call in a fresh container.\nThis directory is granted read-only.\n' >"$demo/ref/README.txt"
chmod 0644 "$demo/ref/README.txt"
cat >"$state/brokerd.toml" <<CONF
[broker]
clients = ["root"]                  # this demo's boxctl runs as root
owners = ["root"]                   # ... and commits and discards what a staged grant holds
audit_log = "$state/audit.jsonl"
shutdown_grace_s = 5

[runner]
backend = "podman"
image = "$image"
egress_network = "slirp4netns"      # Debian's Podman 4.3 has no pasta
enforce_limits = false              # rootless Podman cannot apply limits on cgroup v1
shell_ms = 30000

[grants.notes]                      # auto: reads, writes and plain commands run
mode = "auto"
tools = ["read_file", "write_file", "shell", "http_fetch"]
paths = [ { path = "$demo/notes", write = true }, { path = "$demo/ref" } ]
hosts = ["docs.example.org"]

[grants.review]                     # ask: every change waits for the owner
mode = "ask"
tools = ["read_file", "write_file"]
paths = [ { path = "$demo/notes", write = true } ]

[grants.project]                    # staged: every write waits in the session's layer
mode = "auto"
tools = ["read_file", "write_file", "shell"]
paths = [ { path = "$demo/project", write = true } ]
writes = "staged"

[toolsets.dev]                      # Debian's git, make and gcc, busybox and toolkit
image = "$toolset_image"
tree = "$toolset_tree"

[grants.app]                        # staged, on the dev toolset
mode = "auto"
tools = ["read_file", "write_file", "shell"]
paths = [ { path = "$demo/app", write = true } ]
writes = "staged"
toolset = "dev"
CONF
chown boxmaker:boxmaker "$state/brokerd.toml"
cat "$state/brokerd.toml"
scripts/as-boxmaker "$repo/target/release/brokerd" check-config "$state/brokerd.toml"

step "start brokerd as boxmaker on $socket"
rm -f "$socket"
BROKERD_LOG=info scripts/as-boxmaker "$repo/target/release/brokerd" --config "$state/brokerd.toml" \
    --socket "$socket" 2>"$state/brokerd.log" &
brokerd_pid=$!
for _ in $(seq 100); do
    target/release/boxctl --socket "$socket" status >/dev/null 2>&1 && break
    kill -0 "$brokerd_pid" 2>/dev/null || { cat "$state/brokerd.log" >&2; exit 1; }
    sleep 0.1
done
target/release/boxctl --socket "$socket" status

# One call through boxctl: shows the command line, the answer and boxctl's exit code.
n=0
call() {
    local grant=$1 tool=$2 args=$3
    shift 3
    n=$((n + 1))
    local t0 t1 out code=0
    show "boxctl call --session demo --call c$n --grant $grant $* $tool '$args'"
    t0=$(date +%s%N)
    out=$(target/release/boxctl --socket "$socket" call --session demo --call "c$n" --grant "$grant" "$@" "$tool" "$args") || code=$?
    t1=$(date +%s%N)
    echo "$out"
    echo "(exit $code, $(((t1 - t0) / 1000000)) ms)"
    last=$out
    last_code=$code
}

step "read_file: a file in the read-only directory"
call notes read_file "{\"path\":\"$demo/ref/README.txt\"}"

step "write_file: the notes directory is writable, and the grant is in auto mode"
call notes write_file "{\"path\":\"$demo/notes/todo.txt\",\"content\":\"1. try boxmaker\\n\"}"
echo "on the host: $(ls -l "$demo/notes/todo.txt")"

step "shell: a fresh container that sees only the granted directories and has no network"
call notes shell "{\"command\":\"cat todo.txt; ls /srv; ls /sys/class/net\",\"cwd\":\"$demo/notes\"}"

step "a refusal: a path outside the grant (nothing runs)"
call notes read_file '{"path":"/etc/shadow"}' || true

step "another refusal: http_fetch of a host the grant does not list (nothing runs, no packet)"
call notes http_fetch '{"url":"https://example.com/"}' || true

step "ask: the review grant asks before any change"
rm -f "$demo/notes/review.txt"
args="{\"path\":\"$demo/notes/review.txt\",\"content\":\"approved by the owner\\n\"}"
call review write_file "$args"
ticket=$(printf '%s' "$last" | sed -n 's/.*"ticket":"\([^"]*\)".*/\1/p')
[ -n "$ticket" ] || { echo "demo: no ticket in the answer" >&2; exit 1; }
echo "nothing written yet: $(ls "$demo/notes")"

step "the owner approves: the same call again, with the ticket"
n=$((n - 1))
call review write_file "$args" --approval "$ticket"
echo "on the host: $(cat "$demo/notes/review.txt")"

step "protected files: a script the classifier cannot read tries to change vendor/"
# A string as the model would send it in JSON.
js() { local s=${1//\\/\\\\}; s=${s//\"/\\\"}; s=${s//$'\n'/\\n}; s=${s//$'\t'/\\t}; printf '"%s"' "$s"; }
# The model writes a script, then runs it: `sh ./fix.sh` is shell_complex (the classifier
# cannot read what the file holds), so auto runs it unasked. The mount table holds vendor/.
script=$'echo x > vendor/lib.c\nrm -rf vendor\nmv vendor v2\necho done'
call notes write_file "{\"path\":$(js "$demo/notes/fix.sh"),\"content\":$(js "$script")}"
call notes shell "{\"command\":\"sh ./fix.sh\",\"cwd\":$(js "$demo/notes")}"
[ "$last_code" -eq 0 ] || fail "the script did not run unasked (exit $last_code)"
[ "$(cat "$demo/notes/vendor/lib.c")" = "int vendored;" ] || fail "vendor/lib.c changed on the host"
[ ! -e "$demo/notes/v2" ] || fail "vendor/ was moved on the host"
echo "on the host, unchanged: $(cat "$demo/notes/vendor/lib.c")"

step "staged writes: the same kind of script on the staged grant deletes everything"
# A tree as the host has it: each path with its type and mode, then each file's sha256.
tree_of() {
    (cd "$1" && find . -mindepth 1 -printf '%p %y %m\n' | LC_ALL=C sort &&
        find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum)
}
# The session's staged changes of the project grant, one "kind path" a line, sorted.
staged_changes() {
    target/release/boxctl --socket "$socket" changes --session demo --grant project --text |
        awk '$1 ~ /^(added|modified|deleted|type_changed|mode_changed)$/ { print $1, $2 }' |
        LC_ALL=C sort
}
show "ls -A $demo/project"
ls -A "$demo/project"
before=$(tree_of "$demo/project")
# The script lands in the session's layer, and deletes itself with the rest.
script=$'rm -rf ./*\necho "# rewritten by the agent" > README.md\nls -A'
call project write_file "{\"path\":$(js "$demo/project/build.sh"),\"content\":$(js "$script")}"
[ "$last_code" -eq 0 ] || fail "the staged write_file did not run (exit $last_code)"
call project shell "{\"command\":\"sh ./build.sh\",\"cwd\":$(js "$demo/project")}"
[ "$last_code" -eq 0 ] || fail "the staged script did not run unasked (exit $last_code)"
echo "on the host, nothing changed:"
ls -A "$demo/project"
[ "$(tree_of "$demo/project")" = "$before" ] || fail "the host's project changed before any commit"

step "the owner reads what the session staged"
show "boxctl changes --session demo --grant project --text --diff"
target/release/boxctl --socket "$socket" changes --session demo --grant project --text --diff
want=$(printf '%s\n' "modified $demo/project/README.md" "deleted $demo/project/TODO" \
    "deleted $demo/project/src" "deleted $demo/project/src/main.c" | LC_ALL=C sort)
[ "$(staged_changes)" = "$want" ] || fail "changes does not list the README and every deletion: $(staged_changes)"

step "the owner commits the README alone"
show "boxctl commit --session demo --grant project $demo/project/README.md"
target/release/boxctl --socket "$socket" commit --session demo --grant project "$demo/project/README.md"
echo "on the host:"
ls -A "$demo/project"
cat "$demo/project/README.md"
[ "$(cat "$demo/project/README.md")" = "# rewritten by the agent" ] || fail "the README did not land"
if [ "$(cat "$demo/project/TODO")" != "TODO: tests" ] ||
    [ "$(cat "$demo/project/src/main.c")" != "int main(void) { return 0; }" ]; then
    fail "the commit of the README took the deletions with it"
fi
after_commit=$(tree_of "$demo/project")
[ "$(staged_changes)" = "$(printf '%s\n' "$want" | grep -v README.md)" ] ||
    fail "the deletions are no longer staged: $(staged_changes)"

step "and discards the rest: the deletions never reach the host"
show "boxctl discard --session demo --grant project"
target/release/boxctl --socket "$socket" discard --session demo --grant project
ls -A "$demo/project"
target/release/boxctl --socket "$socket" changes --session demo --grant project --text
[ -z "$(staged_changes)" ] || fail "changes left after the discard: $(staged_changes)"
[ "$(tree_of "$demo/project")" = "$after_commit" ] || fail "the discard changed the host's project"

step "a toolset: the app grant's shell has git, make and gcc; its test fails"
call app shell "{\"command\":\"git log --oneline; make test 2>&1; echo make=\$?\",\"cwd\":$(js "$demo/app")}"
case "$last" in *"sum: add two numbers"*"make=2"*) ;; *) fail "git log or the failing make test did not show" ;; esac

step "the agent fixes the source; make test passes in the sandbox"
call app write_file "{\"path\":$(js "$demo/app/sum.c"),\"content\":$(js "$(sum_c +)")}"
[ "$last_code" -eq 0 ] || fail "the fix was not written (exit $last_code)"
call app shell "{\"command\":\"make test 2>&1; echo make=\$?\",\"cwd\":$(js "$demo/app")}"
case "$last" in *"test passed"*"make=0"*) ;; *) fail "make test did not pass after the fix" ;; esac
echo "on the host, still the old source and no build: $(grep atoi "$demo/app/sum.c"); $(ls "$demo/app" | tr "\n" " ")"
[ ! -e "$demo/app/build" ] || fail "the build's output reached the host before any commit"

step "the owner commits the fix alone and discards the build's output"
show "boxctl changes --session demo --grant app --text --diff"
target/release/boxctl --socket "$socket" changes --session demo --grant app --text --diff
show "boxctl commit --session demo --grant app $demo/app/sum.c"
target/release/boxctl --socket "$socket" commit --session demo --grant app "$demo/app/sum.c"
show "boxctl discard --session demo --grant app"
target/release/boxctl --socket "$socket" discard --session demo --grant app
echo "on the host: $(grep atoi "$demo/app/sum.c"); $(ls "$demo/app" | tr "\n" " ")"
[ "$(cat "$demo/app/sum.c")" = "$(sum_c +)" ] || fail "the fix did not land"
[ ! -e "$demo/app/build" ] || fail "the build's output reached the host"

step "the audit log: one hash-chained record per decision (metadata only)"
show "tail -n 4 $state/audit.jsonl"
tail -n 4 "$state/audit.jsonl"
target/release/boxctl audit verify "$state/audit.jsonl" || true

step "stop brokerd (SIGTERM) and check that nothing is left"
stop_brokerd
tail -n 2 "$state/brokerd.log"
left=$(scripts/as-boxmaker podman ps -a --filter label=boxmaker --format '{{.Names}}' 2>/dev/null)
if [ -n "$left" ]; then
    echo "demo: containers left: $left" >&2
    exit 1
fi
echo "no boxmaker container is left; the demo's files are in $demo and $state"
