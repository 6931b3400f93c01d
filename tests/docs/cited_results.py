#!/usr/bin/python3
"""cited_results.py SOURCE_DIR: every results/ path the docs cite exists, and every cited
result JSON's git_sha names a commit of this repository.

The docs: README.md, docs/*.md and results/README.md. A cited path is any text starting with
`results/` (also as `../results/`), in prose, code spans, code blocks and links. Globs
(`results/cpu/*.json`) must match at least one file, brace lists (`{a,b}.png`) are expanded and
each must exist. Skipped as placeholders: a path with `...` in it, or one followed at once by
`<` or `$` (`results/slurm/<name>-<job id>/`).

For each cited `.json` file, and each `.json` file directly inside a cited folder, every "git_sha" field in it (top level or nested) must name a
commit: the part before any suffix ("-dirty") is given to `git cat-file -e SHA^{commit}` in
SOURCE_DIR. "unknown" or an empty value fails unless the doc line that cites the file says
"unknown". Where SOURCE_DIR is not a git checkout of its own (a copy without .git) or a shallow
clone, the commits cannot be checked: after the existence checks the script says so and exits
77 (CTest's SKIP_RETURN_CODE).

Each failure is printed as FILE:LINE: PATH: what is wrong. Standard library only.
"""
import glob
import json
import os
import re
import subprocess
import sys

SKIP = 77
# `results/` not preceded by a path character (so `tests/inputs/results/x` is not a citation);
# braces only as a list ({a,b}), so a comma after a path ends it.
PATH_RE = re.compile(r"(?<![\w./-])(?:\.\./)*(results/(?:[A-Za-z0-9_.*?/+-]|\{[A-Za-z0-9_.,/+-]*\})*)")
HEX_RE = re.compile(r"^[0-9a-fA-F]{4,40}$")


def docs_of(src):
    files = ["README.md"] + sorted(os.path.relpath(p, src) for p in glob.glob(os.path.join(src, "docs", "*.md")))
    files.append(os.path.join("results", "README.md"))
    return [f for f in files if os.path.isfile(os.path.join(src, f))]


def expand_braces(path):
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    out = []
    for alt in m.group(1).split(","):
        out.extend(expand_braces(path[: m.start()] + alt + path[m.end():]))
    return out


def citations(src, doc):
    """(line number, line, cited path) for each citation in doc."""
    with open(os.path.join(src, doc), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            for m in PATH_RE.finditer(line):
                path = m.group(1).rstrip(".")
                nxt = line[m.end(1): m.end(1) + 1]
                if "..." in m.group(1) or nxt in ("<", "$"):
                    continue  # a placeholder, not a file
                yield n, line, path


def git_shas(node, acc):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "git_sha":
                acc.add("" if v is None else str(v))
            else:
                git_shas(v, acc)
    elif isinstance(node, list):
        for v in node:
            git_shas(v, acc)
    return acc


def git(src, *args):
    try:
        r = subprocess.run(["git", "-C", src, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def why_no_git(src):
    """None when src is the top of a git checkout with full history, else the reason."""
    top = git(src, "rev-parse", "--show-toplevel")
    if top is None:
        return f"{src} is not a git checkout (no .git, or git is missing)"
    if os.path.realpath(top) != os.path.realpath(src):
        return f"{src} has no repository of its own (it lies inside {top})"
    if git(src, "rev-parse", "--is-shallow-repository") == "true":
        return f"{src} is a shallow clone: older commits are not in it"
    return None


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[0])
        return 2
    src = os.path.abspath(sys.argv[1])
    failures = []
    cited = 0
    json_cites = {}  # json path -> [(doc, line number, line)]
    for doc in docs_of(src):
        for n, line, path in citations(src, doc):
            cited += 1
            where = f"{doc}:{n}: {path}"
            found = []
            for p in expand_braces(path):
                full = os.path.join(src, p)
                if any(c in p for c in "*?"):
                    matches = sorted(glob.glob(full))
                    if not matches:
                        failures.append(f"{where}: matches no file")
                    found.extend(os.path.relpath(m, src) for m in matches)
                elif not os.path.exists(full):
                    failures.append(f"{where}: does not exist" + (f" ({p})" if p != path else ""))
                else:
                    found.append(os.path.normpath(p))
            for p in found:
                full = os.path.join(src, p)
                # A cited folder cites the JSON files directly inside it.
                files = [os.path.join(p, f) for f in sorted(os.listdir(full))] if os.path.isdir(full) else [p]
                for q in files:
                    if q.endswith(".json") and os.path.isfile(os.path.join(src, q)):
                        json_cites.setdefault(os.path.normpath(q), []).append((doc, n, line))

    no_git = why_no_git(src)
    checked = 0
    commits = {}
    for p, cites in sorted(json_cites.items()):
        try:
            with open(os.path.join(src, p), encoding="utf-8") as f:
                shas = git_shas(json.load(f), set())
        except (OSError, ValueError) as e:
            for doc, n, _ in cites:
                failures.append(f"{doc}:{n}: {p}: not readable JSON ({e})")
            continue
        for sha in sorted(shas):
            if sha in ("", "unknown"):
                for doc, n, line in cites:
                    if "unknown" not in line.lower():
                        failures.append(f"{doc}:{n}: {p}: git_sha is {sha or 'empty'!r} and the line citing it "
                                        "does not say \"unknown\"")
                continue
            base = sha.split("-", 1)[0]
            if not HEX_RE.match(base):
                for doc, n, _ in cites:
                    failures.append(f"{doc}:{n}: {p}: git_sha {sha!r} is not a commit hash")
                continue
            if no_git:
                continue
            if base not in commits:
                commits[base] = git(src, "cat-file", "-e", base + "^{commit}") is not None
            checked += 1
            if not commits[base]:
                for doc, n, _ in cites:
                    failures.append(f"{doc}:{n}: {p}: git_sha {sha!r} names no commit of this repository")

    for f in failures:
        print("FAIL: " + f)
    if failures:
        print(f"cited_results: {len(failures)} failure(s) among {cited} citations of results/")
        return 1
    if no_git:
        print(f"skip: {cited} cited results/ paths exist; their JSON's git_sha not checked: {no_git}")
        return SKIP
    print(f"ok: {cited} citations of results/ in {len(docs_of(src))} docs exist; "
          f"{len(json_cites)} cited JSON files, {checked} git_sha values, each a commit of this repository")
    return 0


if __name__ == "__main__":
    sys.exit(main())
