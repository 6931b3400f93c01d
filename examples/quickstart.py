# PYTHONPATH=build/python mpirun -np 3 /usr/bin/python3 examples/quickstart.py
from mpi4py import MPI
import numpy as np
import shardsync

s = shardsync.Session(MPI.COMM_WORLD, model="tiny-qwen3", trainer="tp1", inference="tp2")

if s.is_trainer:  # rank 0: the trainer's HF tensors (here every one whole: tp1)
    weights = {name: np.empty(t.shape, dtype=np.uint16) for name, t in s.tensors().items()}
    for name, w in weights.items():
        s.bind(name, w, dtype="bfloat16")  # numpy has no bf16: uint16 bits, declared
    for step in (1, 2, 3):
        for w in weights.values():  # the optimizer step writes the tensors in place
            w[...] = np.float32(step).view(np.uint32) >> 16  # bf16 of `step`
        s.publish(version=step)  # returns once every receiver has read this version

else:  # ranks 1, 2: one vLLM replica of TP2, parameters under vLLM's names
    params = {name: np.empty(t.shape, dtype=np.uint16) for name, t in s.tensors().items()}
    for name, p in params.items():
        s.bind(name, p, dtype="bfloat16")  # qkv_proj, gate_up_proj, o_proj, ...
    for step in (1, 2, 3):
        s.pull(version=step)  # the parameters now hold this version
        qkv = params["model.layers.0.self_attn.qkv_proj.weight"]
        print(f"rank {s.rank}: version {s.held_version[0]}, qkv_proj {qkv.shape}, "
              f"all {np.float32(step)}: {bool((qkv == (np.float32(step).view(np.uint32) >> 16)).all())}")

s.close()
