#!/usr/bin/env python3
"""The performance gate's catch and false-alarm rates, from recorded rounds.

Replays the gate's own decision rule (scripts/perf-check.py: compare(), its rounds per step,
the confirmation) over relative speeds that gate runs recorded round by round, instead of
trusting a normal model of the noise:

  --unchanged FILE   recorded rounds of unchanged code: gate reports (--report) of a build
                     against its reference, or a calibration's runs (--calibrate --report);
  --slowed FILE      gate reports whose candidate ran with SHARDSYNC_TEST_SLOW_ENGINE=NAME:F[,..]
                     or SHARDSYNC_TEST_SLOW_COPY=F (the slowed metrics are read from that).

Two replays, both printed:
  blocks     the recorded rounds in the order they were measured, cut into consecutive gate
             runs (the step's rounds, then as many again as its confirmation): every round is
             used once, so this is the literal replay, with few runs;
  resampled  --trials gate runs, each drawing its rounds (and its confirmation's) at random
             from the pool, whole rounds at a time so that the metrics of one round stay
             together: an estimate with a small binomial error.
False alarm: a gate run of unchanged code in which any gated metric regresses (after the
confirmation). Catch: a gate run of a slowed engine in which that engine's metric regresses.
The real gate runs among the files are listed with their verdicts as recorded.

--require "false<=0.05" --require "catch>=0.95" make the exit status 1 when a resampled rate
misses (the issue's bar: a 20% slower broadcast, V3 or V4 caught at least 19 times in 20,
unchanged code failed at most 1 time in 20). --json OUT writes every number.
"""
import argparse
import importlib.util
import json
import os
import random
import statistics
import sys


def load_gate_module():
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("perf_check", os.path.join(here, "perf-check.py"))
    pc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pc)
    return pc


def die(msg):
    print("perf-rates: error: " + msg, file=sys.stderr)
    sys.exit(2)


def runs_of(path):
    """[(summary, candidate_env, verdict or None)] of a gate report or a calibration file."""
    try:
        with open(path) as f:
            j = json.load(f)
    except (OSError, ValueError) as e:
        die("%s: %s" % (path, e))
    if "runs" in j:  # a calibration: the build against itself, no hooks
        return [(r, {}, None) for r in j["runs"]]
    if "summary" not in j or "reference" not in j:
        die("%s: expected a gate report (summary, reference) or a calibration (runs)" % path)
    # A confirmed metric's "rounds" hold its first rounds and the confirmation's, in that order.
    summary = j["summary"]
    verdict = {"regressed": j.get("regressed", []), "cleared": j.get("cleared", []), "speeds": j.get("speeds", {}),
               "confirmed": (j.get("confirmation") or {}).get("speeds", {})}
    return [(summary, j.get("candidate_env") or {}, verdict)]


def slowed_metrics(env):
    """The metrics a hook slows: an engine's sync in every engine step (the hook stretches that
    engine's every sync, whatever the transport or layout), every copy ratio."""
    out = {}
    for item in env.get("SHARDSYNC_TEST_SLOW_ENGINE", "").split(","):
        if ":" in item:
            name, f = item.split(":", 1)
            for step in ("engine", "engine_ucx", "engine_tp2"):
                out["%s.%s.sync_s" % (step, name)] = float(f)
    if "SHARDSYNC_TEST_SLOW_COPY" in env:
        out["copy.*"] = float(env["SHARDSYNC_TEST_SLOW_COPY"])
    return out


def step_records(summaries, step):
    """Whole rounds of one step: per run, round i of every metric of that step, in order."""
    recs = []
    for s in summaries:
        names = [k for k in s if k.split(".")[0] == step and s[k].get("rounds")]
        if not names:
            continue
        n = max(len(s[k]["rounds"]) for k in names)
        for i in range(n):
            recs.append({k: s[k]["rounds"][i] for k in names if i < len(s[k]["rounds"])})
    return recs


def gate_run(pc, baseline, first, again, only=None):
    """The gate's verdict on these rounds (lists of {metric: speed}): the metrics that regress.
    `only`: judge these metrics alone (a slowed run's other metrics are not its question)."""
    def medians(recs):
        names = set().union(*recs) if recs else set()
        return {k: statistics.median([r[k] for r in recs if k in r]) for k in names}
    speeds = medians(first)
    if only is not None:
        speeds = {k: v for k, v in speeds.items() if k in only}
    # Only calibrated metrics: a rate is about the thresholds, not about a missing calibration.
    speeds = {k: v for k, v in speeds.items() if k in baseline["metrics"]}
    _, regressed, _, _ = pc.compare(speeds, baseline)
    if not regressed:
        return []
    pooled = medians(first + again)
    confirmed = {k: pooled[k] for k in regressed if k in pooled}
    _, regressed, _, _ = pc.compare(speeds, baseline, confirmed)
    return regressed


def rates(pc, baseline, pools, trials, rng, only_of=None):
    """pools: step -> records. Returns (blocks: [failed?], resampled failure fraction, per-metric counts)."""
    per_step = {s: pc.STEP_ROUNDS[s] for s in pools}
    # Blocks: the i-th gate run takes rounds [2ni, 2ni + n) first and [2ni + n, 2n(i+1)) to confirm.
    nblocks = min(len(pools[s]) // (2 * n) for s, n in per_step.items()) if pools else 0
    blocks = []
    for i in range(nblocks):
        failed = []
        for s, n in per_step.items():
            recs = pools[s]
            failed += gate_run(pc, baseline, recs[2 * n * i:2 * n * i + n], recs[2 * n * i + n:2 * n * (i + 1)], only_of)
        blocks.append(failed)
    fails, by_metric = 0, {}
    for _ in range(trials):
        failed = []
        for s, n in per_step.items():
            recs = pools[s]
            first = [rng.choice(recs) for _ in range(n)]
            again = [rng.choice(recs) for _ in range(n)]
            failed += gate_run(pc, baseline, first, again, only_of)
        fails += bool(failed)
        for k in failed:
            by_metric[k] = by_metric.get(k, 0) + 1
    return blocks, fails / trials if trials else 0.0, by_metric


def real_run(pc, baseline, path, kind, verdict):
    """A real gate run: its verdict as recorded, and judged again on its own speeds with today's
    thresholds (a metric today's thresholds flag that was not measured again then has no
    confirmation rounds: judged on its first rounds)."""
    speeds = {k: v for k, v in verdict["speeds"].items() if v is not None}
    _, today, _, _ = pc.compare(speeds, baseline, verdict["confirmed"])
    return {"file": path, "kind": kind, "regressed": verdict["regressed"], "regressed_today": today}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--baseline", default=os.path.join(here, "..", "results", "perf-baseline.json"))
    ap.add_argument("--unchanged", action="append", default=[], help="recorded rounds of unchanged code (repeatable)")
    ap.add_argument("--slowed", action="append", default=[], help="gate reports with a slowed candidate (repeatable)")
    ap.add_argument("--steps", default="engine", help="steps whose false alarms count (comma list; default engine)")
    ap.add_argument("--trials", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--require", action="append", default=[], help='"false<=X" or "catch>=X" on the resampled rates')
    ap.add_argument("--json", help="write every number here")
    args = ap.parse_args()
    if not args.unchanged and not args.slowed:
        die("give --unchanged and/or --slowed files")
    pc = load_gate_module()
    baseline = pc.load_baseline(args.baseline)
    steps = [s for s in args.steps.split(",") if s]
    for s in steps:
        if s not in pc.STEP_ROUNDS:
            die("--steps: unknown step '%s' (%s)" % (s, ", ".join(pc.STEP_ROUNDS)))
    rng = random.Random(args.seed)
    out = {"baseline": args.baseline, "reference_commit": baseline["reference_commit"], "trials": args.trials,
           "seed": args.seed, "rounds": {s: pc.STEP_ROUNDS[s] for s in steps}, "unchanged": None, "slowed": {},
           "real_runs": []}
    ok = True

    def check(kind, value):
        nonlocal ok
        for r in args.require:
            if r.startswith(kind):
                op, bound = ("<=", float(r.split("<=")[1])) if "<=" in r else (">=", float(r.split(">=")[1]))
                good = value <= bound if op == "<=" else value >= bound
                ok &= good
                return " (required %s %s: %s)" % (op, bound, "met" if good else "MISSED")
        return ""

    if args.unchanged:
        summaries, files = [], []
        for p in args.unchanged:
            for summary, env, verdict in runs_of(p):
                if env:
                    die("--unchanged %s: its candidate ran with test hooks (%s)" % (p, ", ".join(env)))
                summaries.append(summary)
                if verdict is not None:
                    out["real_runs"].append(real_run(pc, baseline, p, "unchanged", verdict))
        pools = {s: step_records(summaries, s) for s in steps}
        for s in steps:
            if not pools[s]:
                die("--unchanged: no recorded rounds of step %s" % s)
        blocks, frac, by_metric = rates(pc, baseline, pools, args.trials, rng)
        nfail = sum(1 for b in blocks if b)
        out["unchanged"] = {"rounds": {s: len(pools[s]) for s in steps}, "files": len(args.unchanged),
                            "blocks": len(blocks), "blocks_failed": nfail, "false_alarm": frac,
                            "failed_metrics": by_metric}
        print("# unchanged code: %s recorded rounds from %d file(s)" % (
            ", ".join("%s %d" % (s, len(pools[s])) for s in steps), len(args.unchanged)))
        print("  blocks (each round used once): %d of %d gate runs failed" % (nfail, len(blocks)))
        print("  resampled: false alarm %.4f of %d gate runs%s%s" % (
            frac, args.trials, check("false", frac),
            "; failing metrics: " + ", ".join("%s %d" % kv for kv in sorted(by_metric.items())) if by_metric else ""))

    if args.slowed:
        by_target = {}
        for p in args.slowed:
            for summary, env, verdict in runs_of(p):
                targets = slowed_metrics(env)
                if not targets:
                    die("--slowed %s: its candidate ran without SHARDSYNC_TEST_SLOW_ENGINE or _COPY" % p)
                for t, f in targets.items():
                    by_target.setdefault((t, f), []).append(summary)
                if verdict is not None:
                    out["real_runs"].append(real_run(pc, baseline, p, "slowed: " + ", ".join(
                        "%s=%s" % kv for kv in sorted(env.items())), verdict))
        for (t, f), summaries in sorted(by_target.items()):
            step = t.split(".")[0]
            pools = {step: step_records(summaries, step)}
            if t != "copy.*" and not any(t in r for r in pools[step]):
                continue  # that step was not run (a slowed run of the engine step alone)
            only = [k for k in baseline["metrics"] if (k.startswith("copy.") if t == "copy.*" else k == t)
                    and baseline["metrics"][k].get("gated", True)]
            if not only:
                print("# %s x%s: not gated, no catch rate" % (t, f))
                continue
            blocks, frac, _ = rates(pc, baseline, pools, args.trials, rng, only)
            caught = sum(1 for b in blocks if b)
            out["slowed"]["%s x%s" % (t, f)] = {"rounds": len(pools[step]), "blocks": len(blocks), "blocks_caught": caught,
                                                "catch": frac, "threshold": baseline["metrics"].get(t, {}).get("threshold"),
                                                "median_speed": statistics.median(r[t] for r in pools[step] if t in r)
                                                if t != "copy.*" else None}
            print("# %s, every sync x%s (speed %.3f): %d recorded rounds" % (t, f, 1 / f, len(pools[step])))
            print("  blocks: caught in %d of %d gate runs" % (caught, len(blocks)))
            print("  resampled: catch %.4f of %d gate runs%s" % (frac, args.trials, check("catch", frac)))

    if out["real_runs"]:
        print("# real gate runs: the verdict recorded then; judged again with today's thresholds")
        for r in out["real_runs"]:
            v = lambda x: "regressed: " + ", ".join(x) if x else "passed"
            print("  %s (%s): then %s; today %s" % (r["file"], r["kind"], v(r["regressed"]), v(r["regressed_today"])))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
