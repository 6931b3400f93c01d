#!/usr/bin/env python3
"""shardsync performance gate (make perf-check).

Runs the micro-benchmarks and a short engine run on local ranks, turns them into ratios that
do not depend on how fast the machine is, and compares those with the thresholds committed in
results/perf-baseline.json:

  copy.<case>.pack, .pack_each, .unpack memcpy time / pack (unpack) time of the same bytes
                                         (shardsync-microbench BM_Copy), higher is better
  engine.<e>.vs_broadcast                broadcast sync time / engine sync time, same run
                                         (shardsync bench --layout perf-gate-local), higher is better
  overhead.<e>.memcpy_bytes              an engine's per-tensor cost (many tiny tensors, mpirun
                                         shardsync-microbench BM_EngineSync) expressed as the bytes
                                         memcpy moves in that time, lower is better

A metric that misses its threshold is measured again (its whole step, --attempts in all) and
its best value kept; what still misses is reported with how far it is off, and the exit
status is 1. Exit status 2: a step failed to run.

Thresholds come from repeated runs (--calibrate N --write-baseline FILE): for each metric the
worst of N values, loosened by a factor of max(1.10, sqrt(max / min)) of those N values. So a
noisy metric gets a looser threshold, and the file says how noisy each one was.
"""
import argparse
import datetime
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time

STEPS = ("copy", "engine", "overhead")
MPIRUN = ["mpirun", "--oversubscribe"]
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
MIN_MARGIN = 0.10
# A copy ratio's threshold never exceeds the target (pack/unpack at 80% of memcpy): where
# glibc's memcpy is slow (as on the dev VM) the kernels run above 100% of it, and a machine
# whose memcpy is relatively faster must not fail kernels that meet the target.
COPY_TARGET = 0.80


def fail(msg, status=2):
    print("perf-check: error: " + msg, file=sys.stderr)
    sys.exit(status)


def run(cmd, timeout, what):
    env = dict(os.environ, **MPI_ENV)
    # Its own process group, so that a timeout ends mpirun's ranks too, not only mpirun.
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                break
            time.sleep(2)
        p.communicate()
        fail("%s: did not finish within %d s: %s" % (what, timeout, " ".join(cmd)))
    if p.returncode != 0:
        sys.stderr.write(out[-4000:])
        fail("%s: exit status %d: %s" % (what, p.returncode, " ".join(cmd)))
    return out


def gbench_json(path, what):
    try:
        with open(path) as f:
            rows = json.load(f)["benchmarks"]
    except (OSError, ValueError, KeyError) as e:
        fail("%s: no benchmark results in %s: %s" % (what, path, e))
    if not rows:
        fail("%s: the benchmark filter matched nothing" % what)
    return rows


def microbench(build, args, what, timeout, mpi_ranks=0):
    exe = os.path.join(build, "apps", "shardsync-microbench")
    if not os.access(exe, os.X_OK):
        fail("%s not built (configure with -DSHARDSYNC_BUILD_BENCH=ON)" % exe)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "mb.json")
        cmd = [exe, "--benchmark_out=" + out, "--benchmark_out_format=json"] + args
        if mpi_ranks:
            cmd = MPIRUN + ["-np", str(mpi_ranks)] + cmd
        run(cmd, timeout, what)
        return gbench_json(out, what)


def memcpy_bandwidth(build):
    rows = microbench(build, ["--benchmark_filter=BM_Copy/expert_w13/memcpy"], "memcpy bandwidth", 300)
    return iterations(rows)[0]["bytes_per_second"]


def iterations(rows):
    """Measured rows only (BENCHMARK_REPETITIONS in the environment would add aggregates)."""
    return [r for r in rows if r.get("run_type", "iteration") == "iteration"]


def step_copy(build, state):
    rows = microbench(build, ["--benchmark_filter=BM_Copy/"], "copy micro-benchmarks", 600)
    t = {}
    for r in iterations(rows):
        case, op = r["name"].split("/")[1:3]
        t[(case, op)] = min(r["real_time"], t.get((case, op), float("inf")))
        if case == "expert_w13" and op == "memcpy":
            state["memcpy_Bps"] = r["bytes_per_second"]
    m = {}
    for (case, op), v in t.items():
        if op != "memcpy":
            if (case, "memcpy") not in t:
                fail("copy micro-benchmarks: no memcpy result for case %s" % case)
            m["copy.%s.%s" % (case, op)] = t[(case, "memcpy")] / v
    return m


def step_engine(build, state):
    exe = os.path.join(build, "apps", "shardsync")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        run(MPIRUN + ["-np", "4", exe, "bench", "--layout", "perf-gate-local", "--syncs", "10", "--warmup", "1", "-q",
                      "--json", out], 600, "engine run (shardsync bench)")
        with open(out) as f:
            result = json.load(f)
    # Per engine, the median over its timed syncs of the slowest rank's time: one sync
    # disturbed by a neighbour on a shared machine moves the median little.
    engines = {}
    for e in result["engines"]:
        timed = [s["time_s"] for s in e["syncs"] if not s.get("warmup") and not s.get("skipped")]
        if not timed:
            fail("engine run: %s has no timed syncs" % e["engine"])
        engines[e["engine"]] = statistics.median(timed)
    return {"engine.%s.vs_broadcast" % e: engines["broadcast"] / v for e, v in engines.items() if e != "broadcast"}


def step_overhead(build, state):
    if "memcpy_Bps" not in state:
        state["memcpy_Bps"] = memcpy_bandwidth(build)
    rows = microbench(build, [], "engine micro-benchmarks (mpirun -np 4)", 600, mpi_ranks=4)
    m = {}
    for r in rows:
        if r.get("run_type") == "aggregate" and r.get("aggregate_name") == "median":
            engine = r["name"].split("/")[1]
            state.setdefault("us_per_tensor", {})[engine] = r["us_per_tensor"]
            m["overhead.%s.memcpy_bytes" % engine] = r["us_per_tensor"] * 1e-6 * state["memcpy_Bps"]
    want = engine_names(build)
    got = sorted(k.split(".")[1] for k in m)
    if got != sorted(want):
        fail("engine micro-benchmarks: expected the median of every engine row (%s), got %s"
             % (", ".join(want), ", ".join(sorted(m)) or "none"))
    return m


def engine_names(build):
    """The rows of the engine table (shardsync engines --names): what the benchmarks run."""
    exe = os.path.join(build, "apps", "shardsync")
    out = subprocess.run([exe, "engines", "--names"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0 or not out.stdout.split():
        fail("%s engines --names failed: %s" % (exe, out.stderr.strip()))
    return out.stdout.split()


STEP_FUNCS = {"copy": step_copy, "engine": step_engine, "overhead": step_overhead}


def higher_is_better(name):
    return not name.startswith("overhead.")


def passes(name, value, threshold):
    return value >= threshold if higher_is_better(name) else value <= threshold


def measure(build, steps, state):
    values, origin = {}, {}
    for s in steps:
        print("perf-check: running %s ..." % s, flush=True)
        for k, v in STEP_FUNCS[s](build, state).items():
            values[k], origin[k] = v, s
    return values, origin


def fmt(v):
    return "%.4g" % v


def compare(values, baseline, attempts_used):
    rows, regressed = [], []
    for name in sorted(values):
        v = values[name]
        b = baseline["metrics"].get(name)
        if b is None:
            rows.append((name, fmt(v), "-", "-", "-", "new (no threshold yet)"))
            continue
        ok = passes(name, v, b["threshold"])
        change = (v / b["median"] - 1) * 100 if b["median"] else 0.0
        status = "ok" if ok else "REGRESSED"
        if not ok:
            thr = b["threshold"] or 1e-300
            off = (1 - v / thr) * 100 if higher_is_better(name) else (v / thr - 1) * 100
            status += " (%.1f%% %s threshold after %d attempt%s)" % (
                off, "below" if higher_is_better(name) else "above", attempts_used.get(name, 1),
                "" if attempts_used.get(name, 1) == 1 else "s")
            regressed.append(name)
        rows.append((name, fmt(v), ("≥ " if higher_is_better(name) else "≤ ") + fmt(b["threshold"]), fmt(b["median"]),
                     "%+.1f%%" % change, status))
    return rows, regressed


def print_table(rows):
    head = ("metric", "value", "threshold", "baseline", "vs_base", "status")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    line = lambda r: "  ".join(str(c).ljust(widths[i]) for i, c in enumerate(r)).rstrip()
    print("# " + line(head))
    for r in rows:
        print("  " + line(r))


def load_baseline(path):
    try:
        with open(path) as f:
            b = json.load(f)
    except (OSError, ValueError) as e:
        fail("%s: cannot read the baseline: %s" % (path, e))
    if not isinstance(b.get("metrics"), dict):
        fail("%s: metrics: expected an object of metric name -> {threshold, median}" % path)
    for name, m in b["metrics"].items():
        for key in ("threshold", "median"):
            if not isinstance(m.get(key), (int, float)):
                fail("%s: metrics.%s.%s: expected a number" % (path, name, key))
    return b


def gate(args):
    baseline = load_baseline(args.baseline)
    state = {}
    if args.metrics:
        with open(args.metrics) as f:
            values = json.load(f)
        origin = {}
        attempts_used = {}
    else:
        values, origin = measure(args.build, args.only, state)
        attempts_used = {k: 1 for k in values}
        for attempt in range(2, args.attempts + 1):
            failing = [k for k, v in values.items() if k in baseline["metrics"] and not passes(k, v, baseline["metrics"][k]["threshold"])]
            if not failing:
                break
            steps = [s for s in args.only if any(origin[k] == s for k in failing)]
            print("perf-check: %d metric(s) below threshold (%s); measuring %s again (attempt %d of %d)"
                  % (len(failing), ", ".join(failing), "+".join(steps), attempt, args.attempts), flush=True)
            again, _ = measure(args.build, steps, state)
            for k, v in again.items():
                if k in failing:
                    attempts_used[k] = attempt
                better = v > values[k] if higher_is_better(k) else v < values[k]
                if better:
                    values[k] = v
    missing = [k for k in baseline["metrics"] if k.split(".")[0] in args.only and k not in values]
    rows, regressed = compare(values, baseline, attempts_used)
    print("# performance gate: %d metrics against %s (calibrated on %s)"
          % (len(values), args.baseline, baseline.get("machine", "?")))
    here = "%d cores, %s" % (os.cpu_count(), cpu_model())
    if not args.metrics and here not in baseline.get("machine", ""):
        print("# note: this machine (%s) is not the one the thresholds were calibrated on; "
              "if it differs in kind, recalibrate (make perf-calibrate)" % here)
    print_table(rows)
    report = {"date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
              "host": platform.node(), "baseline": args.baseline, "values": values, "regressed": regressed,
              "missing": missing, "state": state, "slow_copy_hook": os.environ.get("SHARDSYNC_TEST_SLOW_COPY")}
    if args.report:
        os.makedirs(os.path.dirname(os.path.abspath(args.report)), exist_ok=True)
        with open(args.report, "w") as f:
            json.dump(report, f, indent=1)
    if missing:
        fail("metrics in the baseline were not measured: " + ", ".join(missing))
    if regressed:
        print("perf-check: FAILED: %d of %d metrics regressed: %s" % (len(regressed), len(values), ", ".join(regressed)))
        return 1
    print("perf-check: passed (%d metrics)" % len(values))
    return 0


def threshold_for(name, lo, hi):
    """(max/min, loosening factor, threshold) of a metric seen between lo and hi."""
    spread = hi / lo if lo > 0 else 1.0
    factor = max(1 + MIN_MARGIN, spread ** 0.5)
    if not higher_is_better(name):
        return spread, factor, hi * factor
    thr = lo / factor
    return spread, factor, min(thr, COPY_TARGET) if name.startswith("copy.") else thr


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def calibrate(args):
    runs = []
    for i in range(args.calibrate):
        print("perf-check: calibration run %d of %d" % (i + 1, args.calibrate), flush=True)
        values, _ = measure(args.build, args.only, {})
        runs.append(values)
    metrics = {}
    for name in sorted(runs[0]):
        vs = [r[name] for r in runs if name in r]
        med = statistics.median(vs)
        spread, factor, thr = threshold_for(name, min(vs), max(vs))
        metrics[name] = {"threshold": round(thr, 4), "median": round(med, 4), "min": round(min(vs), 4),
                         "max": round(max(vs), 4), "max_over_min": round(spread, 4), "factor": round(factor, 4),
                         "higher_is_better": higher_is_better(name)}
    out = {"schema": 1,
           "method": "over %d runs on this machine: threshold = worst value / factor (higher is better) or worst * factor "
                     "(lower is better), factor = max(%.2f, sqrt(max / min)): the noise seen in the runs sets the margin; "
                     "copy ratios' thresholds are capped at the %.2f target; "
                     "made by: scripts/perf-check.py --calibrate %d --write-baseline" % (args.calibrate, 1 + MIN_MARGIN, COPY_TARGET, args.calibrate),
           "machine": "%s, %d cores, %s" % (platform.node(), os.cpu_count(), cpu_model()),
           "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "runs": len(runs), "metrics": metrics}
    print("# %-32s %9s %9s %9s %8s %9s" % ("metric", "median", "min", "max", "max/min", "threshold"))
    for k, m in metrics.items():
        print("  %-32s %9s %9s %9s %8.2f %9s" % (k, fmt(m["median"]), fmt(m["min"]), fmt(m["max"]), m["max_over_min"], fmt(m["threshold"])))
    if args.write_baseline:
        with open(args.write_baseline, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
        print("perf-check: wrote " + args.write_baseline)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="build directory (default: build)")
    ap.add_argument("--baseline", default="results/perf-baseline.json", help="committed thresholds")
    ap.add_argument("--report", default="", help="write the measured values and verdict to this JSON file")
    ap.add_argument("--only", default=",".join(STEPS), help="steps to run: copy, engine, overhead (default: all)")
    ap.add_argument("--attempts", type=int, default=3, help="measurements of a failing metric before it counts (default 3)")
    ap.add_argument("--metrics", default="", help="compare these metric values (JSON name -> value) instead of measuring")
    ap.add_argument("--calibrate", type=int, default=0, metavar="N", help="measure N times and print each metric's spread")
    ap.add_argument("--write-baseline", default="", metavar="FILE", help="with --calibrate: write the thresholds here")
    args = ap.parse_args()
    args.only = [s for s in args.only.split(",") if s]
    for s in args.only:
        if s not in STEPS:
            fail("--only: %s: expected a comma-separated list of %s" % (s, ", ".join(STEPS)))
    if args.attempts < 1:
        fail("--attempts: expected at least 1")
    if args.calibrate:
        return calibrate(args)
    return gate(args)


if __name__ == "__main__":
    sys.exit(main())
