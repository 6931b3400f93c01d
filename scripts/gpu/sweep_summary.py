#!/usr/bin/env python3
"""One line per case of a strided sweep's JSON lines (bench/gpu/strided_sweep.cu): source,
case, kernel, jobs, GB/s one way and the units it copied wrong; its failure count last.

  python3 scripts/gpu/sweep_summary.py results/gpu/align/strided-sweep-ipc.jsonl
"""
import json
import sys


def main(path):
    for line in open(path):
        d = json.loads(line)
        if "case" in d:
            print("# %-5s %-22s %-9s jobs %-5d %7.1f GB/s one way, %d wrong" % (
                d["source"], d["case"], d["kernel"], d["jobs"], d["GBps_one_way"], d["wrong_units"]))
        else:
            print("# sweep", json.dumps(d))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
