#!/usr/bin/python3
"""An uncaught error on one rank must not hang the job: trainer rank 0 raises between binding
and its publish; the receivers, waiting in pull, see it lost (its session left at exit) and
end with the one line naming it. Run under mpirun -np 3 (tiny-qwen3, tp1 -> tp2); the test
(tests/CMakeLists.txt, api.error_exit) expects a non-zero exit within its timeout and the line."""
import numpy as np
from mpi4py import MPI

import shardsync

s = shardsync.Session(MPI.COMM_WORLD, model="tiny-qwen3", trainer="tp1", inference="tp2", failure_timeout_s=2)
for name, info in s.tensors().items():
    s.bind(name, np.zeros(info.shape, dtype=np.uint16), dtype="bfloat16")
if s.is_trainer:
    raise RuntimeError("the trainer's step failed")
s.pull(1)
