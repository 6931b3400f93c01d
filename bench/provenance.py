"""The commit of this project's sources, as its builds record it (cmake/GitSha.cmake): the
project's own repository's HEAD ("-dirty" with tracked changes), never the commit of a
repository that merely encloses the tree; in a copy without its own repository, the commit that
`make stamp` wrote into .shardsync-commit, with "-stamp-mismatch" when the stamped source hash
is not that of the copy's sources (cmake/SourceHash.cmake); else "unknown". No environment
variable overrides it."""
import os
import subprocess

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def _run(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT).stdout.strip()
    except Exception:
        return ""


def project_commit():
    top = _run(["git", "rev-parse", "--show-toplevel"])
    if top and os.path.realpath(top) == os.path.realpath(ROOT):
        sha = _run(["git", "rev-parse", "--short=12", "HEAD"])
        if sha and _run(["git", "status", "--porcelain", "--untracked-files=no"]):
            sha += "-dirty"
        return sha or "unknown"
    try:
        with open(os.path.join(ROOT, ".shardsync-commit")) as f:
            lines = [line.strip() for line in f.readlines()[:2]]
    except OSError:
        return "unknown"
    if not lines or not lines[0]:
        return "unknown"
    stamped = lines[1][len("sources "):] if len(lines) > 1 and lines[1].startswith("sources ") else ""
    here = _run(["cmake", "-DSRC=" + ROOT, "-P", os.path.join(ROOT, "cmake", "SourceHash.cmake")])
    return lines[0] if stamped and stamped == here else lines[0] + "-stamp-mismatch"
