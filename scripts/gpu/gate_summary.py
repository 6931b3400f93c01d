#!/usr/bin/env python3
"""gate_summary.py OUT PAIRS: the GPU gate's verdicts from its runs (scripts/gpu/gate.sh).

Per case and pair, the relative speed base time / candidate time (1.0 unchanged, 0.9 a tenth
slower): the sync cases take each run's median over its timed syncs of the slowest rank's time,
fp8 the kernel's time. The verdict per case is the median relative speed over the pairs with
its spread (lowest and highest pair); a case REGRESSED when its median is under THRESHOLD and
every pair is under 1.0, so that one disturbed pair neither fails nor hides a slowdown. Every
run must have verified every byte (#wrong 0; fp8: no wrong code or scale). Writes gate.json
beside the runs. Exit 1 on a regression, a wrong byte or a missing run.
"""
import json
import os
import statistics
import sys

THRESHOLD = 0.95
CASES = ("one-pass", "fp8", "moe")


def measure(path, case):
    with open(path) as f:
        j = json.load(f)
    if case == "fp8":
        wrong = j["wrong_codes"] + j["wrong_scales"]
        return j["quantize_s"], wrong, j.get("commit", "?")
    (e,) = j["engines"]
    times = [s["time_s"] for s in e["syncs"] if not s.get("warmup") and not s.get("skipped")]
    return statistics.median(times), e["wrong"], j.get("git_sha", "?")


def main():
    out, pairs = sys.argv[1], int(sys.argv[2])
    ok, report = True, {"threshold": THRESHOLD, "pairs": pairs, "cases": {}}
    print("# case      base_s      new_s  speed (median)  lowest  highest  verdict")
    for case in CASES:
        speeds, base_t, new_t = [], [], []
        for p in range(1, pairs + 1):
            try:
                b, bw, bsha = measure(os.path.join(out, "%s-base-%d.json" % (case, p)), case)
                n, nw, nsha = measure(os.path.join(out, "%s-new-%d.json" % (case, p)), case)
            except (OSError, ValueError, KeyError) as e:
                print("  %s pair %d: missing or unreadable run: %s" % (case, p, e))
                ok = False
                continue
            if bw or nw:
                print("  %s pair %d: WRONG bytes (base %d, candidate %d)" % (case, p, bw, nw))
                ok = False
            speeds.append(b / n)
            base_t.append(b)
            new_t.append(n)
            report.setdefault("commits", {"base": bsha, "candidate": nsha})
        if not speeds:
            continue
        med = statistics.median(speeds)
        regressed = med < THRESHOLD and max(speeds) < 1.0
        ok &= not regressed
        verdict = "REGRESSED (%.1f%% slower)" % ((1 - med) * 100) if regressed else "ok"
        print("  %-8s %8.6f %10.6f %8.4f %14.4f %8.4f  %s" % (case, statistics.median(base_t), statistics.median(new_t),
                                                          med, min(speeds), max(speeds), verdict))
        report["cases"][case] = {"speeds": [round(s, 4) for s in speeds], "speed": med, "lowest": min(speeds),
                                 "highest": max(speeds), "base_s": base_t, "candidate_s": new_t, "regressed": regressed}
    with open(os.path.join(out, "gate.json"), "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    print("# GPU gate: %s" % ("passed" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
