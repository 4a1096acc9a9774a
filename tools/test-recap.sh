#!/usr/bin/env bash
# Prints again, last, the tests that failed in make test's steps: their names and output, from the go test -json
# each step kept in bin/test-results (TEST_RESULTS), read back through gotestsum. .ci/run calls it when make test
# fails, so that the failure is what a CI log ends with, whatever else (a build beside it) printed after it.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${TEST_RESULTS:-$root/bin/test-results}"
gotestsum="$(ls "$root"/bin/lint/gotestsum-* 2>/dev/null | tail -n 1)"
[ -n "$gotestsum" ] || { echo "test-recap: no gotestsum in $root/bin/lint (make test builds it)"; exit 0; }
failed=()
for f in "$dir"/*.json; do
  [ -e "$f" ] || continue
  grep -q '"Action":"fail"' "$f" && failed+=("$f")
done
if [ ${#failed[@]} -eq 0 ]; then
  echo "test-recap: no go test step recorded a failure in $dir (a build, lint or set-up step failed: see above)"
  exit 0
fi
for f in "${failed[@]}"; do
  echo
  echo "================ test-recap: failures of $(basename "$f" .json) ================"
  # Only the summary: the failed tests, each with its output.
  "$gotestsum" --format dots-v2 --hide-summary skipped --raw-command -- cat "$f" 2>&1 | sed -n '/^=== \(Failed\|Errors\)/,$p'
done
