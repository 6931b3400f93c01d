#!/usr/bin/python3
"""An uncaught error on one rank must not hang the job, and the library must not end the
others: trainer rank 0 raises between binding and its second publish; the receivers, waiting
in pull, see it lost (its session left at exit) and their pull raises shardsync.Error naming
it, which they report before exiting with status 3. Run under mpirun -np 3 (tiny-qwen3, tp1 ->
tp2); api.error_exit expects a non-zero exit within its timeout and that report."""
import sys

import numpy as np
from mpi4py import MPI

import shardsync

s = shardsync.Session(MPI.COMM_WORLD, model="tiny-qwen3", trainer="tp1", inference="tp2", failure_timeout_s=2)
for name, info in s.tensors().items():
    s.bind(name, np.zeros(info.shape, dtype=np.uint16), dtype="bfloat16")
if s.is_trainer:
    s.publish(1)
    raise RuntimeError("the trainer's step failed")
s.pull(1)
try:
    s.pull(2)
except shardsync.Error as e:
    print(f"rank {s.rank}: shardsync.Error: {e}", flush=True)
    s.close()  # no collective end after a loss
    sys.exit(3)
print(f"rank {s.rank}: pull(2) returned though the trainer died", flush=True)
