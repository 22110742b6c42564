#!/usr/bin/env bash
# Builds every cargo-fuzz target of fuzz/ once and runs each for a bounded time.
#
#   hack/fuzz.sh [seconds]      seconds per target (default $KOORD_FUZZ_SECONDS, else 60)
#
# Environment:
#   KOORD_FUZZ_SECONDS   seconds per target when no argument is given
#   KOORD_FUZZ_JOBS      targets run at once (default 1; each fuzzer uses one core)
#   KOORD_FUZZ_TARGETS   space-separated subset of targets (default: all)
#   KOORD_FUZZ_TARGET_DIR  cargo target directory of the fuzz build (default fuzz/target;
#                        .ci/run keeps it under /var/cache so that a CI run on the same
#                        machine rebuilds only what changed)
#
# A crash (panic), a timeout (an input taking over 10 s) or running out of
# memory (over 2 GiB) fails the script: it prints the fuzzer's report, the
# input in hex and how to replay it, and exits non-zero. The committed seeds
# (fuzz/corpus/<target>/) are only read: what the fuzzer finds goes to a
# scratch corpus in the build's target directory, never into the repository.
#
# Builds use a nightly toolchain when rustup has one, else the default toolchain
# with RUSTC_BOOTSTRAP=1 (a `-s none` build passes no -Z flag today; this keeps
# it working should cargo-fuzz add one). No AddressSanitizer (`-s none`): the
# code under test is safe Rust (`unsafe_code = "deny"`), and ASan made a small
# parser target run 2.7x fewer executions here, for bugs (out-of-bounds,
# use-after-free) that safe code cannot have; the build (fuzz/Cargo.toml's
# profile; a cold one took 22 min on this two-core machine while it was busy)
# has no time to spare.
# Panics, overflow checks and debug assertions stay on.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

seconds="${1:-${KOORD_FUZZ_SECONDS:-60}}"
jobs="${KOORD_FUZZ_JOBS:-1}"
case "$seconds" in '' | *[!0-9]*) echo "usage: hack/fuzz.sh [seconds]" >&2; exit 2 ;; esac

if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  cargo=(cargo +nightly)
else
  echo "no nightly toolchain: building with $(rustc --version) and RUSTC_BOOTSTRAP=1"
  export RUSTC_BOOTSTRAP=1
  cargo=(cargo)
fi
if ! command -v cargo-fuzz >/dev/null; then
  cargo install cargo-fuzz --version 0.13.2 --locked
fi

# The flags of every build: `cargo fuzz run` would rebuild with other flags.
build_flags=(--sanitizer none --codegen-units 16)
target_dir="${KOORD_FUZZ_TARGET_DIR:-target}"
build_flags+=(--target-dir "$target_dir")
# cargo never removes old artifacts: a kept directory past 20 GB starts over.
if [ -d "$target_dir" ] && [ "$(du -sm "$target_dir" | cut -f1)" -gt 20000 ]; then
  echo "$target_dir is over 20 GB: removing it"
  rm -rf "$target_dir"
fi
started=$SECONDS
# Not --locked (cargo-fuzz has no such flag): a dependency added to a product
# crate without updating fuzz/Cargo.lock is resolved here, and said.
"${cargo[@]}" fuzz build "${build_flags[@]}"
echo "fuzz build: $((SECONDS - started)) s"
if command -v git >/dev/null && ! git diff --quiet -- Cargo.lock 2>/dev/null; then
  echo "note: fuzz/Cargo.lock was updated by this build (commit it with the dependency change)"
fi

bin_dir="$target_dir/x86_64-unknown-linux-gnu/release"
work="$target_dir/fuzz-runs"
rm -rf "$work" && mkdir -p "$work"
read -r -a targets <<<"${KOORD_FUZZ_TARGETS:-$("${cargo[@]}" fuzz list | tr '\n' ' ')}"

run_target() {
  local target=$1
  mkdir -p "$work/$target/corpus" "$work/$target/artifacts"
  # New inputs go to the first directory (scratch); the seeds are only read.
  "$bin_dir/$target" "$work/$target/corpus" "corpus/$target" \
    -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=16384 \
    -print_final_stats=1 -artifact_prefix="$work/$target/artifacts/" \
    >"$work/$target/log" 2>&1
}

report() {
  local target=$1 status=$2 executed
  executed=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$target/log" | tail -1)
  if [ "$status" = 0 ]; then
    printf '%-16s ok      %10s executions in %s s\n' "$target" "${executed:-?}" "$seconds"
    return
  fi
  printf '%-16s FAILED  (exit %s) after %s executions\n' "$target" "$status" "${executed:-?}"
  echo "---- $work/$target/log (last 60 lines)"
  tail -60 "$work/$target/log"
  for artifact in "$work/$target"/artifacts/*; do
    [ -f "$artifact" ] || continue
    echo "---- $artifact ($(wc -c <"$artifact") bytes; replay: $bin_dir/$target <file>, in fuzz/)"
    head -c 1024 "$artifact" | od -A d -t x1 -v
  done
}

declare -A pids=()
failed=0
finish_one() {
  local pid target status=0
  wait -n -p pid "${!pids[@]}" || status=$?
  target=${pids[$pid]}
  unset "pids[$pid]"
  report "$target" "$status"
  [ "$status" = 0 ] || failed=1
}
echo "fuzzing ${#targets[@]} targets for $seconds s each, $jobs at a time"
for target in "${targets[@]}"; do
  while [ "${#pids[@]}" -ge "$jobs" ]; do finish_one; done
  run_target "$target" &
  pids[$!]=$target
done
while [ "${#pids[@]}" -gt 0 ]; do finish_one; done
if [ "$failed" != 0 ]; then
  echo "fuzzing found a crash, timeout or out-of-memory (see above)" >&2
  exit 1
fi
echo "fuzzing: no findings"
