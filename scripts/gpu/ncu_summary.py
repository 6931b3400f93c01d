#!/usr/bin/env python3
"""One line per profiled kernel launch of an `ncu --csv` log with the metrics
gpu__time_duration.sum, dram__bytes_read.sum and dram__bytes_write.sum (one-pass.sh):
time, bytes read + written, and that over the time.

  python3 scripts/gpu/ncu_summary.py results/gpu/one-pass/ncu-qwen3-8b-tp1-tp2-v4.csv
"""
import csv
import os
import sys


def main(path):
    launches = {}
    with open(path) as f:
        for row in csv.reader(f):
            if len(row) < 15 or not row[0].isdigit():  # ncu's own lines, the header
                continue
            kernel = row[4].split("(")[0].replace("void ", "")
            launches.setdefault((int(row[0]), kernel, row[8]), {})[row[12]] = float(row[14].replace(",", ""))
    if not launches:
        print(f"# ncu {os.path.basename(path)}: no kernel launches profiled")
        return 1
    for (i, kernel, grid), m in sorted(launches.items()):
        t = m.get("gpu__time_duration.sum", 0) / 1e9
        rw = m.get("dram__bytes_read.sum", 0) + m.get("dram__bytes_write.sum", 0)
        print(f"# ncu {os.path.basename(path)} launch {i} {kernel[-34:]} grid {grid}: {t * 1e3:.3f} ms, "
              f"{rw / 1e9:.3f} GB read+written, {rw / t / 1e9 if t else 0:.1f} GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
