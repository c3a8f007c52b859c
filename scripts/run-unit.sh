#!/usr/bin/env bash
# Runs each C unit-test binary and prints one closing line: "N passed, N failed".
set -u
passed=0 failed=0
for test in "$@"; do
  if "$test"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $test"; fi
done
echo "unit: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
