#!/usr/bin/env bash
# expect.sh ok|fail REGEX -- COMMAND...
# Runs COMMAND under a timeout; passes when the exit status is as expected (0 for ok,
# non-zero for fail, and never a timeout) and stdout+stderr match the extended REGEX.
set -u
want="$1"; regex="$2"; shift 2
[[ "$1" == "--" ]] && shift
out=$(timeout "${EXPECT_TIMEOUT:-120}" "$@" 2>&1)
rc=$?
if [[ $rc -eq 124 ]]; then
  echo "FAIL: timed out (hang): $*"; echo "$out" | tail -20; exit 1
fi
if [[ "$want" == ok && $rc -ne 0 ]]; then
  echo "FAIL: exit $rc, expected 0: $*"; echo "$out" | tail -40; exit 1
fi
if [[ "$want" == fail && $rc -eq 0 ]]; then
  echo "FAIL: exit 0, expected an error: $*"; echo "$out" | tail -40; exit 1
fi
if ! grep -Eq -- "$regex" <<<"$out"; then
  echo "FAIL: output does not match /$regex/: $*"; echo "$out" | tail -40; exit 1
fi
echo "ok (exit $rc, matched /$regex/)"
