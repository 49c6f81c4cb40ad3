#!/usr/bin/env bash
# Runs each cmocka test binary given on the command line, from the
# repository root, and ends with one summary line: "N passed, N failed".
set -u
passed=0 failed=0
for t in "$@"; do
    out=$("$t" 2>&1); rc=$?
    printf '%s\n' "$out"
    p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -1)
    f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -1)
    passed=$((passed + ${p:-0}))
    failed=$((failed + ${f:-0}))
    if [ $rc -ne 0 ] && [ -z "$f" ]; then
        echo "$t: exited with status $rc"
        failed=$((failed + 1))
    fi
done
echo "$passed passed, $failed failed"
[ -n "${KK_SUMMARY:-}" ] && echo "$passed passed, $failed failed" >> "$KK_SUMMARY"
[ $failed -eq 0 ]
