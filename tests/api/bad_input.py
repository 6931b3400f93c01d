#!/usr/bin/python3
"""shardsync's Python API refuses bad input with shardsync.Error naming the tensor, the
expected and the given, on the rank that saw it, and the session still works afterwards
(every refusal is local: no collective was entered). Run under mpirun -np 3 (tiny-qwen3,
trainer tp1 -> inference tp2). Exit 0 when every case raised the expected message and the
final sync moved every byte."""
import ctypes
import re
import sys

import numpy as np
from mpi4py import MPI

import shardsync

failures = []


def expect(pattern, f):
    try:
        f()
    except shardsync.Error as e:
        if not re.search(pattern, str(e)):
            failures.append(f"message {str(e)!r} does not match {pattern!r}")
        return
    failures.append(f"no error (expected {pattern!r})")


comm = MPI.COMM_WORLD
expect(r"options_json: model: a string", lambda: shardsync.Session(comm, model=3, trainer="tp1", inference="tp2"))
expect(r"communicator: size 3: 5 ranks: trainer tp1.* = 1, inference tp4.* = 4",
       lambda: shardsync.Session(comm, model="tiny-qwen3", trainer="tp1", inference="tp4"))
expect(r"engine: v9: one of broadcast, v1, v2, v3, v4",
       lambda: shardsync.Session(comm, model="tiny-qwen3", trainer="tp1", inference="tp2", engine="v9"))
s = shardsync.Session(comm, model="tiny-qwen3", trainer="tp1", inference="tp2")
tensors = s.tensors()
name = "model.layers.0.self_attn.o_proj.weight"
info = tensors[name]
good = np.zeros(info.shape, dtype=np.uint16)
expect(r"no\.such\.weight: \(name\): a tensor of (trainer|inference) rank", lambda: s.bind("no.such.weight", good, dtype="bfloat16"))
expect(rf"{re.escape(name)}: shape: \[{info.shape[0]}, {info.shape[1]}\] .*given \[{info.shape[0]}, {info.shape[1] - 1}\]",
       lambda: s.bind(name, np.zeros((info.shape[0], info.shape[1] - 1), dtype=np.uint16), dtype="bfloat16"))
expect(rf"{re.escape(name)}: dtype: bf16, given f32", lambda: s.bind(name, np.zeros(info.shape, dtype=np.float32)))
expect(rf"{re.escape(name)}: a uint16 array carries bf16 only when declared", lambda: s.bind(name, good))
expect(rf"{re.escape(name)}: a C-contiguous array", lambda: s.bind(name, np.zeros((info.shape[1], info.shape[0]), np.uint16).T,
                                                              dtype="bfloat16"))
# A CUDA pointer where the session holds host memory (the C ABI, as a torch CUDA tensor would arrive).
shape = (ctypes.c_int64 * 2)(*info.shape)
lib = shardsync._library()
status = lib.shardsync_bind(s._h, name.encode(), ctypes.c_void_p(good.ctypes.data), b"bf16", 2, shape, b"cuda")
if status != 2 or not re.search(rf"{re.escape(name)}: device: host memory \(the session's\), given cuda",
                                lib.shardsync_last_error().decode()):
    failures.append(f"cuda pointer: status {status}, {lib.shardsync_last_error().decode()!r}")
if lib.shardsync_abi_version() != shardsync.ABI_VERSION:
    failures.append("ABI version")
s.bind(name, good, dtype="bfloat16")
expect(rf"{re.escape(name)}: \(bound\): each tensor bound once", lambda: s.bind(name, good, dtype="bfloat16"))
# Publishing (or pulling) before every tensor is bound: refused, naming one and the count.
expect(r": \(not bound\): every tensor bound before the first (publish|pull): \d+ of \d+ are not",
       lambda: (s.publish(1) if s.is_trainer else s.pull(1)))
expect(r"(publish: rank \d+ is an inference rank|pull: rank 0 is a trainer rank)",
       lambda: (s.pull(1) if s.is_trainer else s.publish(1)))
arrays = {n: np.zeros(t.shape, dtype=np.uint16) for n, t in tensors.items() if n != name}
for n, a in arrays.items():
    s.bind(n, a, dtype="bfloat16")
if s.is_trainer:
    for a in list(arrays.values()) + [good]:
        a[...] = 0x3F80  # 1.0 in bf16
sync = s.publish if s.is_trainer else s.pull
sync(2)
expect(r"(publish|pull)\(version\): 2: greater than the last version, 2", lambda: sync(2))
expect(r"(publish|pull)\(version\): 1: greater than the last version, 2", lambda: sync(1))
if not s.is_trainer:
    moved = all(np.all(a == 0x3F80) for n, a in arrays.items() if "embed" not in n) and np.all(good == 0x3F80)
    if not moved or s.held_version != (2, False):
        failures.append(f"rank {s.rank}: the sync after the refusals did not land (held {s.held_version})")
s.close()
all_failures = comm.gather(failures, root=0)
if comm.rank == 0:
    bad = [f"rank {r}: {f}" for r, fs in enumerate(all_failures) for f in fs]
    print("\n".join(bad) if bad else "bad_input: every refusal named the tensor, the expected and the given; the session synced after them")
    sys.exit(1 if bad else 0)
