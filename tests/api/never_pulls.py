#!/usr/bin/python3
"""A receiver that never pulls must not hold the trainers forever. Inference rank 2 (world rank
2) binds its parameters, then does not pull version 2 for longer than the stall timeout while its
process lives (heartbeats keep coming). The trainer's publish(2) must raise shardsync.Error
within the stall timeout plus a margin, naming the phase and the receiver it waited for; rank 1
gets version 2 whole (the trainer serves it) and stays until rank 2 is done, and no rank hangs.
Run under mpirun -np 3 (tiny-qwen3, tp1 -> tp2); api.never_pulls expects the trainer's report."""
import sys
import time

import numpy as np
from mpi4py import MPI

import shardsync

STALL = 3.0
s = shardsync.Session(MPI.COMM_WORLD, model="tiny-qwen3", trainer="tp1", inference="tp2", stall_timeout_s=STALL)
for name, info in s.tensors().items():
    s.bind(name, np.zeros(info.shape, dtype=np.uint16), dtype="bfloat16")
(s.publish if s.is_trainer else s.pull)(1)
if s.rank == 2:  # alive, but busy elsewhere: no pull of version 2
    time.sleep(3 * STALL)
    print(f"rank 2: slept {3 * STALL:.0f} s without pulling", flush=True)
    s.close()
    sys.exit(0)
t0 = time.monotonic()
try:
    (s.publish if s.is_trainer else s.pull)(2)
except shardsync.Error as e:
    took = time.monotonic() - t0
    role = "publish" if s.is_trainer else "pull"
    print(f"rank {s.rank}: {role}(2) raised after {took:.1f} s (stall timeout {STALL:.0f} s): {e}", flush=True)
    s.close()
    sys.exit(3 if took < STALL + 10 else 4)
if s.is_trainer:
    print(f"rank {s.rank}: publish(2) completed though rank 2 never pulled", flush=True)
    sys.exit(5)
print(f"rank {s.rank}: pulled version 2 whole: {s.held_version}", flush=True)
time.sleep(3 * STALL)  # not gone before the trainer has given up on rank 2
s.close()
