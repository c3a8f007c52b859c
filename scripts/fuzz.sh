#!/usr/bin/env bash
# Runs the libFuzzer harnesses of tests/fuzz/ (built by make fuzz-build into build-fuzz/).
#   fuzz.sh run SECONDS TARGET...     fuzz each target for SECONDS from its corpus, then merge the
#                                     inputs that reached new code into tests/fuzz/corpus/TARGET
#   fuzz.sh replay 0 TARGET...        run each corpus file once; fails on any crash or report
# A crash leaves its input in build-fuzz/artifacts/TARGET/ (add it to the corpus once fixed).
set -u
mode=$1 seconds=$2
shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build-fuzz
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=0
for target in "$@"; do
  binary=$build/bin/fuzz_$target corpus=$here/tests/fuzz/corpus/$target
  artifacts=$build/artifacts/$target/ work=$build/corpus/$target
  mkdir -p "$artifacts" "$work" "$corpus"
  case $mode in
    run)
      echo "== fuzz_$target: $seconds s"
      "$binary" -max_total_time="$seconds" -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$artifacts" "$work" "$corpus" 2>"$build/fuzz_$target.log"
      status=$?
      grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' \
        "$build/fuzz_$target.log"
      if [ $status -ne 0 ]; then
        failed=$((failed + 1))
        echo "FAILED: fuzz_$target (log: $build/fuzz_$target.log)"
        grep -m1 -E 'ERROR: |SUMMARY: |fuzz: ' "$build/fuzz_$target.log"
        continue
      fi
      "$binary" -merge=1 -artifact_prefix="$artifacts" "$corpus" "$work" >/dev/null 2>&1 ||
        echo "fuzz_$target: merging into $corpus failed"
      echo "fuzz_$target: $(ls "$corpus" | wc -l) corpus files"
      ;;
    replay)
      files=("$corpus"/*)
      if ! "$binary" -artifact_prefix="$artifacts" "${files[@]}" >"$build/replay_$target.log" 2>&1; then
        failed=$((failed + 1))
        echo "FAILED: fuzz_$target replay (log: $build/replay_$target.log)"
        grep -m1 -E 'ERROR: |SUMMARY: |fuzz: |Running: ' "$build/replay_$target.log"
      fi
      ;;
    *) echo "usage: fuzz.sh run SECONDS TARGET... | replay 0 TARGET..." >&2; exit 2 ;;
  esac
done
echo "fuzz: $# targets, $failed failed"
[ "$failed" -eq 0 ]
