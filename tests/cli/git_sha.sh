#!/usr/bin/env bash
# git_sha.sh GITSHA_CMAKE: the commit a build records (cmake/GitSha.cmake), in each case:
# its own repository (clean, then with a tracked file changed: -dirty), a copy inside another
# repository without its own .git (never the enclosing repository's commit: "unknown", or
# the commit in .shardsync-commit when `make stamp` wrote it with the hash of these very
# sources; "-stamp-mismatch" when a source changed after stamping, or the stamp has no hash),
# and no environment variable changes any of it (SHARDSYNC_COMMIT is gone).
set -u
script="$1"
unset SHARDSYNC_COMMIT
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
recorded() {  # SRC: the commit a build of SRC records
  rm -f "$d/out.h"
  cmake -DSRC="$1" -DOUT="$d/out.h" -P "$script" || fail "cmake -P failed for $1"
  sed -E 's/^#define SHARDSYNC_GIT_SHA "(.*)"$/\1/' "$d/out.h"
}
git() { command git -c user.name=t -c user.email=t@t -c init.defaultBranch=main "$@"; }
mkdir -p "$d/own" && (cd "$d/own" && git init -q && echo a > f && git add f && git commit -qm one) || fail "git setup"
own=$(cd "$d/own" && git rev-parse --short=12 HEAD)
got=$(recorded "$d/own")
[[ "$got" == "$own" ]] || fail "own clean repository: recorded '$got', expected '$own'"
echo b > "$d/own/f"
got=$(recorded "$d/own")
[[ "$got" == "$own-dirty" ]] || fail "own repository with a change: recorded '$got', expected '$own-dirty'"
# A copy of the tree inside the enclosing repository, without a .git of its own.
mkdir -p "$d/own/copy" && echo x > "$d/own/copy/CMakeLists.txt"
got=$(recorded "$d/own/copy")
[[ "$got" == unknown ]] || fail "copy inside another repository: recorded '$got', expected 'unknown' (not the enclosing $own)"
# A stamp as make stamp writes it: the commit and the hash of the copy's sources.
mkdir -p "$d/own/copy/lib" && echo "int x;" > "$d/own/copy/lib/a.cpp"
hash=$(cmake -DSRC="$d/own/copy" -P "$(dirname "$script")/SourceHash.cmake") || fail "SourceHash.cmake failed"
# make stamp hashes "." from inside the tree: the same hash, one that covers lib/a.cpp.
dot=$(cd "$d/own/copy" && cmake -DSRC=. -P "$(dirname "$(realpath "$script")")/SourceHash.cmake") || fail "SourceHash.cmake failed on ."
[[ "$dot" == "$hash" ]] || fail "the hash of . ($dot) differs from the hash of its absolute path ($hash)"
printf 'abc123def456\nsources %s\n' "$hash" > "$d/own/copy/.shardsync-commit"
got=$(recorded "$d/own/copy")
[[ "$got" == abc123def456 ]] || fail "copy with its stamp: recorded '$got', expected 'abc123def456'"
got=$(SHARDSYNC_COMMIT=feedface recorded "$d/own/copy")
[[ "$got" == abc123def456 ]] || fail "SHARDSYNC_COMMIT in the environment: recorded '$got', expected 'abc123def456' (no override)"
# A source changed after the stamp: the stamp describes other sources.
echo "int y;" > "$d/own/copy/lib/a.cpp"
got=$(recorded "$d/own/copy")
[[ "$got" == abc123def456-stamp-mismatch ]] || fail "stale stamp: recorded '$got', expected 'abc123def456-stamp-mismatch'"
# A stamp without the source hash (an old make stamp) cannot be checked: a mismatch too.
echo "abc123def456" > "$d/own/copy/.shardsync-commit"
got=$(recorded "$d/own/copy")
[[ "$got" == abc123def456-stamp-mismatch ]] || fail "stamp without a hash: recorded '$got', expected 'abc123def456-stamp-mismatch'"
echo "ok: own clean $own, own changed $own-dirty, copy unknown, copy stamped, stale stamp, unhashed stamp, no override"
