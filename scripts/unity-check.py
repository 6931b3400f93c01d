#!/usr/bin/env python3
"""scripts/unity-check.py [BUILD_DIR]: where a unity build could change what a name means.

The sanitizer builds (make test-asan, test-tsan, fuzz-build) are unity builds: CMake compiles a
target's sources in batches, each batch one translation unit. A name one source declares at
namespace scope (in an anonymous namespace, static, or not in any header) is then visible in
the sources after it in its batch. Where another source of the same target declares the same
name, the batch fails to compile (a redefinition) or, with a different signature, becomes an
overload the other source may now pick; where another source uses that name for something
else (a header's function called from inside an anonymous namespace, say), the new
declaration can hide or outbid it. Either can change behaviour without an error.

This configures BUILD_DIR (default build-unity-check) like make test-asan's build but without
unity (so compile_commands.json lists the sources), asks clang-query (Debian: clang-tools-14)
for each source's namespace-scope declarations and the names it refers to, and prints, target
by target, every name that one source declares and another of the same target declares or
refers to (locals and parameters left out), each using-directive, and each macro a source
defines (and does not #undef) that another names. Findings
judged harmless are listed in KNOWN below with why; the exit status is 1 when there is any
other. Run it after adding a source or a file-local helper to a target; UNITY_CHECK_TARGETS="a b"
checks those targets only.
"""
import collections
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLANG_QUERY = "/usr/lib/llvm-14/bin/clang-query"

# (target, name): why it cannot change what a name means.
KNOWN = {
    ("shardsync_engine", "align16"): "identical helpers in schedule.cpp and broadcast.cpp's anonymous "
                                     "namespaces: in one batch a redefinition error, never a silent change",
    ("shardsync_engine", "put"): "identical put/take wrappers of common/bytes.hpp in schedule.cpp and "
                                 "weights.cpp: in one batch a redefinition error",
    ("shardsync_engine", "take"): "as put",
    ("shardsync_plan", "load_weight"): "one function template: declared in plan/loaders.hpp, defined and "
                                       "instantiated in loaders.cpp",
    ("shardsync_transport", "make_hybrid_transport"): "one function: declared in registry.cpp, defined "
                                                      "in hybrid_transport.cpp",
    ("test_device", "using namespace test"): "test_fast_copy.cpp's, inside shardsync's anonymous namespace: "
                                             "tests/tensor/view_chains.hpp's iota, apply_real, random_op and "
                                             "Op, none of which test_fp8/test_synth/test_updates.cpp names",
}

QUERY = """set output dump
set traversal AsIs
match namedDecl(isExpansionInMainFile(), hasDeclContext(anyOf(translationUnitDecl(), namespaceDecl())))
match varDecl(isExpansionInMainFile(), unless(hasDeclContext(anyOf(translationUnitDecl(), namespaceDecl()))))
match bindingDecl(isExpansionInMainFile())
match usingDirectiveDecl(isExpansionInMainFile())
match declRefExpr(isExpansionInMainFile())
match unresolvedLookupExpr(isExpansionInMainFile())
"""
SKIP_WORDS = {"used", "referenced", "implicit", "constexpr", "invalid", "struct", "class", "union", "enum",
              "typename", "inline", "static", "extern", "cinit", "callinit", "listinit", "definition",
              "consteval"}
DECL = re.compile(r"^(\w+Decl) (0x[0-9a-f]+) (?:parent 0x[0-9a-f]+ )?(?:prev (0x[0-9a-f]+) )?<[^>]*> "
                  r"(?:line|col):\d+(?::\d+)? (.*)$")
REF = re.compile(r"^DeclRefExpr .*? (Function|Var|FunctionTemplate|EnumConstant) (0x[0-9a-f]+) '([^']+)'", re.M)
# A call in a template that depends on its parameters: the name, looked up at instantiation.
UNRESOLVED = re.compile(r"^UnresolvedLookupExpr .*? = '([^']+)'", re.M)


def configure(bdir):
    if not os.path.exists(os.path.join(bdir, "compile_commands.json")):
        subprocess.run(["cmake", "-S", ROOT, "-B", bdir, "-DCMAKE_BUILD_TYPE=Debug", "-DSHARDSYNC_CUDA=OFF",
                        "-DSHARDSYNC_BUILD_BENCH=OFF", "-DSHARDSYNC_BUILD_TESTS=ON", "-DSHARDSYNC_FUZZ=ON",
                        "-DCMAKE_C_COMPILER=clang", "-DCMAKE_CXX_COMPILER=clang++", "-DCMAKE_UNITY_BUILD=OFF"],
                       check=True, stdout=subprocess.DEVNULL)
    # The one generated header (lib/git_sha.hpp) a source includes.
    subprocess.run(["cmake", "--build", bdir, "--target", "shardsync_git_sha"], check=True,
                   stdout=subprocess.DEVNULL)


def scan(bdir, src):
    out = subprocess.run([CLANG_QUERY, "-p", bdir, "-f", os.path.join(bdir, "unity-check.query"), src],
                         capture_output=True, text=True).stdout
    # The first matchers' dumps: namespace-scope declarations, then locals and structured
    # bindings (with the variables they hold); clang-query ends each matcher's output with
    # "N matches.".
    declared, usings, local_addrs, own_addrs = set(), [], set(), set()
    section = 1
    for line in out.splitlines():
        if re.match(r"^\d+ match(es)?\.$", line):
            section += 1
            continue
        if section in (2, 3):
            local_addrs.update(re.findall(r"\w+Decl (0x[0-9a-f]+)", line))
            if section == 3:  # the variable a binding of a tuple-like type reads
                local_addrs.update(re.findall(r" Var (0x[0-9a-f]+) ", line))
            continue
        m = DECL.match(line)
        if not m:
            continue
        kind, addr, prev, rest = m.groups()
        words = rest.split()
        if kind == "UsingDirectiveDecl":
            if "implicit" not in words:
                ns = re.search(r"Namespace 0x[0-9a-f]+ '([^']*)'", rest)
                usings.append("using namespace " + (ns.group(1) if ns else "?"))
            continue
        if section != 1 or kind == "NamespaceDecl":
            continue
        own_addrs.add(addr)
        if prev and prev not in own_addrs:
            continue  # a definition of what a header declares
        names = [w.strip("'") for w in words if w not in SKIP_WORDS]
        if names:
            declared.add(names[0])
    refs = {name for _, addr, name in REF.findall(out) if addr not in local_addrs}
    refs |= set(UNRESOLVED.findall(out))
    return declared, set(usings), refs


def main():
    bdir = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build-unity-check"))
    configure(bdir)
    with open(os.path.join(bdir, "unity-check.query"), "w") as f:
        f.write(QUERY)
    targets = collections.defaultdict(dict)
    only = os.environ.get("UNITY_CHECK_TARGETS", "").split()
    for e in json.load(open(os.path.join(bdir, "compile_commands.json"))):
        t = re.search(r"CMakeFiles/([^/]+)\.dir/", e["command"])
        if t and e["file"].endswith(".cpp") and (not only or t.group(1) in only):
            targets[t.group(1)][os.path.relpath(e["file"], ROOT)] = scan(bdir, e["file"])
    findings = []
    for t, files in sorted(targets.items()):
        owners = collections.defaultdict(list)
        for f, (declared, usings, _) in files.items():
            for n in declared:
                owners[n].append(f)
            for u in usings:
                if len(files) > 1:
                    findings.append((t, u, f"{u} in {f}"))
        for n, fs in sorted(owners.items()):
            if len(fs) > 1:
                findings.append((t, n, f"{n}: declared in {' and '.join(sorted(fs))}"))
            for g, (_, _, refs) in sorted(files.items()):
                if g not in fs and n in refs:
                    findings.append((t, n, f"{n}: declared in {' and '.join(sorted(fs))}, referred to in {g}"))
    # Macros a source defines stay defined in the sources after it in its batch.
    for t, files in sorted(targets.items()):
        for f in sorted(files):
            text = open(os.path.join(ROOT, f)).read()
            for macro in re.findall(r"^\s*#\s*define\s+(\w+)", text, re.M):
                if re.search(r"^\s*#\s*undef\s+" + macro + r"\b", text, re.M):
                    continue
                for g in sorted(files):
                    if g != f and re.search(r"\b" + macro + r"\b", open(os.path.join(ROOT, g)).read()):
                        findings.append((t, macro, f"macro {macro}: defined in {f}, named in {g}"))
    new = 0
    for t, key, what in findings:
        why = KNOWN.get((t, key))
        print(f"{t}: {what}" + (f"\n    known: {why}" if why else "\n    NEW: check it"))
        new += why is None
    print(f"unity-check: {len(targets)} targets, {len(findings)} findings, {new} not in KNOWN")
    return 1 if new else 0


if __name__ == "__main__":
    sys.exit(main())
