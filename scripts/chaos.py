#!/usr/bin/env python3
"""shardsync chaos run (make chaos): kill a random inference rank at a random point, many times.

Each trial runs `shardsync sync` on the bundled tiny MoE (6 local ranks: 2 trainers, 2
replicas of 2 inference ranks) with a random sharded engine (v1..v4) over a transport that
survives a dead rank (ucx, host memory), and kills one random inference rank in one of two
ways: from inside at a random sync (--fail-at: after a chunk landed), or from outside with
SIGKILL at a random moment while syncs run (a rank of the other replica slowed, so that a
sync lasts long enough to be hit anywhere). In half the trials a replacement (`shardsync join`) then takes
the dead rank's place through the rendezvous directory.

A trial passes when the job exits 0 within its time limit, every sync it reports verified
every byte of the replicas that were up (0 wrong), the victim's replica was reported down,
and, where a replacement was started, it rejoined and verified the syncs it served. A trial
that runs out of time is a hang (none allowed). Failures keep their logs under --out.

  scripts/chaos.py --ss build/apps/shardsync --trials 50 --out build/chaos
Exit status 0 when every trial passed, 1 otherwise.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
# Open MPI must not tear the job down when one rank dies (README: failure model).
MCA = ["--mca", "orte_enable_recovery", "1", "--mca", "orte_abort_on_non_zero_status", "0",
       "--mca", "orte_allowed_exit_without_sync", "1"]
ENGINES = ("v1", "v2", "v3", "v4")
INFERENCE_RANKS = (2, 3, 4, 5)  # tiny-moe-local: replica 0 = ranks 2, 3; replica 1 = 4, 5
# The slowed survivor's sleep per chunk it lands: a few tenths of a second per sync for each
# engine (v1 lands the most chunks per sync, v3 and v4 the fewest).
SLOW_MS = {"v1": 2, "v2": 5, "v3": 25, "v4": 25}


def wait_for(path, pattern, deadline, proc):
    """Waits until the file at `path` matches `pattern` (or the process ended / time ran out)."""
    rx = re.compile(pattern, re.M)
    while time.time() < deadline:
        try:
            with open(path) as f:
                if rx.search(f.read()):
                    return True
        except OSError:
            pass
        if proc.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def rank_pid(ss, rank):
    out = subprocess.run(["pgrep", "-f", os.path.basename(ss) + " sync"], capture_output=True, text=True).stdout
    for pid in out.split():
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                if b"OMPI_COMM_WORLD_RANK=%d\0" % rank in f.read():
                    return int(pid)
        except OSError:
            continue
    return None


def kill_group(proc):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        time.sleep(1)


def trial(args, rng, n, workdir):
    engine = rng.choice(ENGINES)
    victim = rng.choice(INFERENCE_RANKS)
    how = rng.choice(("inside", "outside"))
    rejoin = rng.random() < 0.5
    syncs = 24 if rejoin else 8  # a rejoin needs the run to outlast detection and the start
    d = os.path.join(workdir, "trial-%03d" % n)
    os.makedirs(d)
    log, out_json = os.path.join(d, "job.log"), os.path.join(d, "job.json")
    # A rank of the other replica is slowed: each sync lasts long enough for an outside kill
    # to land anywhere in it, and the run outlasts a replacement's start.
    survivor = 2 if victim >= 4 else 4
    cmd = ["mpirun", "--oversubscribe"] + MCA + ["-np", "6", args.ss, "sync", "--layout", "tiny-moe-local", "-e", engine,
                                                 "--transport", "ucx", "--warmup", "1", "--syncs", str(syncs),
                                                 "--failure-timeout", "2", "--slow-rank", str(survivor), "--slow-ms", str(SLOW_MS[engine]),
                                                 "--json", out_json]
    desc = {"trial": n, "engine": engine, "victim": victim, "how": how, "rejoin": rejoin}
    if how == "inside":
        k = rng.randint(1, 4)
        desc["at_sync"] = k
        cmd += ["--fail-at", "sync=%d,rank=%d" % (k, victim)]
    rdv = os.path.join(d, "rdv")
    if rejoin:
        os.makedirs(rdv)
        cmd += ["--rendezvous", rdv]
    t0 = time.time()
    deadline = t0 + args.timeout
    with open(log, "w") as lf:
        job = subprocess.Popen(cmd, env=ENV, stdout=lf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               start_new_session=True)
    result = dict(desc, ok=False, hang=False, survivors_verified=False, rejoined=None, why="")
    try:
        if how == "outside":
            if not wait_for(log, r"^# %s sync [1-9]" % engine, deadline, job):
                result["why"] = "no sync progress before the kill"
            else:
                time.sleep(rng.uniform(0.0, 1.0))
                pid = rank_pid(args.ss, victim)
                if pid is None:
                    result["why"] = "victim rank %d not found running" % victim
                else:
                    os.kill(pid, signal.SIGKILL)
                    result["killed_after_s"] = round(time.time() - t0, 2)
        join_rc = None
        if rejoin and not result["why"]:
            if wait_for(log, r"replicas down: %d" % (0 if victim <= 3 else 1), deadline, job):
                jlog = os.path.join(d, "join.log")
                with open(jlog, "w") as jf:
                    jrc = subprocess.run([args.ss, "join", "--layout", "tiny-moe-local", "--rank", str(victim), "--rendezvous",
                                          rdv, "--json", os.path.join(d, "join.json")], env=ENV, stdout=jf,
                                         stderr=subprocess.STDOUT, timeout=max(5, deadline - time.time()))
                join_rc = jrc.returncode
            else:
                result["why"] = "the victim's replica was never reported down"
        remaining = max(1, deadline - time.time())
        rc = job.wait(timeout=remaining)
    except subprocess.TimeoutExpired:
        kill_group(job)
        result.update(hang=True, why="hang: no exit within %d s" % args.timeout)
        return result
    result["wall_s"] = round(time.time() - t0, 2)
    text = open(log).read()
    if result["why"]:
        return result
    if rc != 0:
        result["why"] = "job exit %d" % rc
        return result
    lines = re.findall(r"^# %s sync \d+/\d+: .*$" % engine, text, re.M)
    if not lines or any(" 0 wrong" not in l for l in lines):
        result["why"] = "a sync without '0 wrong' (or none reported)"
        return result
    replica = 0 if victim <= 3 else 1
    if not re.search(r"^# failures: replica %d down at %s sync \d+" % (replica, engine), text, re.M):
        result["why"] = "replica %d not reported down" % replica
        return result
    result["survivors_verified"] = True
    if rejoin:
        jtext = open(os.path.join(d, "join.log")).read() if os.path.exists(os.path.join(d, "join.log")) else ""
        ok = join_rc == 0 and re.search(r"rank %d rejoined at weights version \d+ and served \d+ syncs; every byte verified" % victim,
                                        jtext)
        result["rejoined"] = bool(ok)
        if not ok:
            result["why"] = "the replacement did not rejoin and verify (exit %s)" % join_rc
            return result
    result["ok"] = True
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ss", required=True, help="the shardsync binary (built with UCX)")
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: from the time, printed)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds a trial may take before it counts as a hang")
    ap.add_argument("--out", default="build/chaos", help="folder for summary.txt, trials.json and failed trials' logs")
    a = ap.parse_args()
    if not os.access(a.ss, os.X_OK):
        sys.exit("chaos: --ss %s: not an executable" % a.ss)
    info = subprocess.run([a.ss, "info"], capture_output=True, text=True).stdout
    if not re.search(r"^transports .*\bucx\b", info, re.M):
        sys.exit("chaos: %s: this build has no UCX transport, which surviving a dead rank needs" % a.ss)
    seed = a.seed if a.seed is not None else int(time.time())
    rng = random.Random(seed)
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="chaos-")
    t0 = time.time()
    results = []
    for n in range(1, a.trials + 1):
        r = trial(a, rng, n, work)
        results.append(r)
        print("chaos trial %d/%d: %s %s kill of rank %d%s%s: %s" % (
            n, a.trials, r["engine"], r["how"], r["victim"], " at sync %d" % r["at_sync"] if "at_sync" in r else "",
            ", replacement" if r["rejoin"] else "", "ok" if r["ok"] else "FAILED: " + r["why"]), flush=True)
        if not r["ok"]:
            shutil.copytree(os.path.join(work, "trial-%03d" % n), os.path.join(a.out, "trial-%03d" % n), dirs_exist_ok=True)
    shutil.rmtree(work, ignore_errors=True)
    wall = time.time() - t0
    commit = re.search(r"^commit (\S+)", info, re.M)
    summary = [
        "# shardsync chaos run: %s, commit %s, seed %d, %s" % (time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
                                                              commit.group(1) if commit else "?", seed, os.uname().nodename),
        "# tiny-moe-local, 6 local ranks, --transport ucx (host memory), engines v1..v4 at random",
        "trials %d" % len(results),
        "passed %d" % sum(r["ok"] for r in results),
        "survivors_verified %d" % sum(r["survivors_verified"] for r in results),
        "replacements %d, rejoined_and_verified %d" % (sum(r["rejoin"] for r in results),
                                                      sum(bool(r["rejoined"]) for r in results)),
        "kills inside (--fail-at) %d, outside (SIGKILL) %d" % (sum(r["how"] == "inside" for r in results),
                                                             sum(r["how"] == "outside" for r in results)),
        "hangs %d" % sum(r["hang"] for r in results),
        "failed %d" % sum(not r["ok"] for r in results),
        "wall_s %.0f" % wall,
    ]
    for r in results:
        if not r["ok"]:
            summary.append("failed trial %d: %s" % (r["trial"], r["why"]))
    with open(os.path.join(a.out, "summary.txt"), "w") as f:
        f.write("\n".join(summary) + "\n")
    with open(os.path.join(a.out, "trials.json"), "w") as f:
        json.dump({"seed": seed, "trials": results}, f, indent=1)
    print("\n".join(summary))
    sys.exit(0 if all(r["ok"] for r in results) else 1)


if __name__ == "__main__":
    main()
