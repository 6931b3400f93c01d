"""shardsync: real weights in, real weights out.

Moves an RL trainer's tensors into inference engine parameters laid out as vLLM lays them out
(merged qkv_proj / gate_up_proj, TP slices, experts by EP rank), for any trainer layout the
plans cover, inside an MPI job (mpi4py's COMM_WORLD handed in): ranks 0..T-1 train, the
rest serve inference.

    from mpi4py import MPI
    import shardsync
    s = shardsync.Session(MPI.COMM_WORLD, model="tiny-qwen3", trainer="tp1", inference="tp2")
    for name, info in s.tensors().items():      # this rank's HF shards, or engine parameters
        s.bind(name, my_tensors[name])           # torch tensors (CPU, CUDA) or numpy arrays
    s.publish(version=1)    # trainer ranks: returns once every receiver has read it
    s.pull(version=1)       # inference ranks: the bound parameters now hold version 1

numpy has no bfloat16: pass bf16 as a uint16 array with dtype="bfloat16". Errors raise
shardsync.Error on the rank that saw them, naming the tensor, the expected and the given.
Blocking calls release the GIL (ctypes). The shared library is found beside this file, or at
$SHARDSYNC_LIB.
"""
import atexit
import ctypes
import json
import os
import weakref

__all__ = ["Error", "Session", "TensorInfo", "abi_version"]

ABI_VERSION = 1  # the ABI this wrapper speaks (shardsync.h's SHARDSYNC_ABI_VERSION)


class Error(Exception):
    """A failed shardsync call: the library's message (bad input names the tensor, the expected, the given)."""


class TensorInfo:
    """One tensor of this rank: a trainer's HF shard or an inference rank's engine parameter."""

    def __init__(self, name, dtype, shape, nbytes, slot):
        self.name, self.dtype, self.shape, self.nbytes, self._slot = name, dtype, tuple(shape), nbytes, slot

    def __repr__(self):
        return f"TensorInfo({self.name!r}, {self.dtype}, {list(self.shape)})"


_lib = None
_DTYPES = {"bf16": "bf16", "bfloat16": "bf16", "f16": "f16", "float16": "f16", "half": "f16", "f32": "f32", "float32": "f32",
           "float": "f32"}


def _library():
    global _lib
    if _lib is None:
        path = os.environ.get("SHARDSYNC_LIB") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "libshardsync.so")
        if not os.path.exists(path):
            raise Error(f"{path}: the shardsync library is missing (build it: make python, or set SHARDSYNC_LIB)")
        lib = ctypes.CDLL(path)  # CDLL: every call releases the GIL
        c = ctypes
        sig = {
            "shardsync_abi_version": ([], c.c_int),
            "shardsync_last_error": ([], c.c_char_p),
            "shardsync_open": ([c.c_int64, c.c_char_p, c.POINTER(c.c_void_p)], c.c_int),
            "shardsync_role": ([c.c_void_p] + [c.POINTER(c.c_int)] * 4, c.c_int),
            "shardsync_num_tensors": ([c.c_void_p, c.POINTER(c.c_int)], c.c_int),
            "shardsync_tensor": ([c.c_void_p, c.c_int, c.POINTER(c.c_char_p), c.POINTER(c.c_char_p), c.POINTER(c.c_int),
                                  c.POINTER(c.POINTER(c.c_int64)), c.POINTER(c.c_void_p), c.POINTER(c.c_int64)], c.c_int),
            "shardsync_bind": ([c.c_void_p, c.c_char_p, c.c_void_p, c.c_char_p, c.c_int, c.POINTER(c.c_int64), c.c_char_p],
                               c.c_int),
            "shardsync_publish": ([c.c_void_p, c.c_uint64], c.c_int),
            "shardsync_pull": ([c.c_void_p, c.c_uint64], c.c_int),
            "shardsync_held_version": ([c.c_void_p, c.POINTER(c.c_uint64), c.POINTER(c.c_int)], c.c_int),
            "shardsync_last_sync": ([c.c_void_p, c.POINTER(c.c_double), c.POINTER(c.c_int64), c.POINTER(c.c_int64)], c.c_int),
            "shardsync_last_checksum": ([c.c_void_p, c.POINTER(c.c_int64), c.POINTER(c.c_int64), c.POINTER(c.c_double)],
                                        c.c_int),
            "shardsync_close": ([c.c_void_p], c.c_int),
            "shardsync_free": ([c.c_void_p], c.c_int),
        }
        for name, (args, res) in sig.items():
            f = getattr(lib, name)
            f.argtypes, f.restype = args, res
        if lib.shardsync_abi_version() != ABI_VERSION:
            raise Error(f"{path}: ABI version {lib.shardsync_abi_version()}, this package speaks {ABI_VERSION}")
        _lib = lib
    return _lib


_open_sessions = weakref.WeakSet()


@atexit.register
def _leave_open_sessions():
    """At exit (before mpi4py finalizes MPI), a session never closed, as after an uncaught
    exception, leaves the job without its collective end: its peers see this process lost and
    end with one line, instead of everyone waiting in MPI_Finalize."""
    for s in list(_open_sessions):
        s._free()


def abi_version():
    return _library().shardsync_abi_version()


def _check(status):
    if status != 0:
        raise Error(_library().shardsync_last_error().decode())


def _describe(tensor, declared):
    """(data pointer, dtype name, shape, memory) of a torch tensor or numpy array."""
    mod = type(tensor).__module__
    if mod.startswith("torch"):
        if not tensor.is_contiguous():
            raise Error("a contiguous tensor, given a strided view (call .contiguous())")
        dtype = declared or str(tensor.dtype).replace("torch.", "")
        memory = "cuda" if tensor.is_cuda else "host"
        return tensor.data_ptr(), dtype, tuple(tensor.shape), memory
    import numpy as np
    if not isinstance(tensor, np.ndarray):
        raise Error(f"a torch tensor or a numpy array, given {type(tensor).__name__}")
    if not tensor.flags["C_CONTIGUOUS"]:
        raise Error("a C-contiguous array, given a strided view (np.ascontiguousarray)")
    if tensor.dtype == np.uint16:
        if declared not in ("bfloat16", "bf16"):
            raise Error('a uint16 array carries bf16 only when declared: bind(name, array, dtype="bfloat16")')
        dtype = "bf16"
    else:
        dtype = declared or tensor.dtype.name
    return tensor.ctypes.data, dtype, tuple(tensor.shape), "host"


class Session:
    """One process's part in a weight-sync job (collective over `comm`, an mpi4py communicator)."""

    def __init__(self, comm, model, trainer, inference, replicas=1, engine="v3", transport="auto", memory="host",
                 gpu=None, failure_timeout_s=10.0, stall_timeout_s=120.0, checksum=False, **buffers):
        lib = _library()
        opts = {"model": model, "trainer": trainer, "inference": inference, "replicas": replicas, "engine": engine,
                "transport": transport, "memory": memory, "failure_timeout_s": failure_timeout_s,
                "stall_timeout_s": stall_timeout_s, "checksum": bool(checksum)}
        if gpu is not None:
            opts["gpu"] = gpu
        opts.update(buffers)
        handle = ctypes.c_void_p()
        _check(lib.shardsync_open(comm.py2f(), json.dumps(opts).encode(), ctypes.byref(handle)))
        self._h = handle
        self.memory = memory
        self._bound = {}
        _open_sessions.add(self)
        t, r, rep, local = (ctypes.c_int() for _ in range(4))
        _check(lib.shardsync_role(self._h, ctypes.byref(t), ctypes.byref(r), ctypes.byref(rep), ctypes.byref(local)))
        self.is_trainer, self.rank, self.replica, self.local_rank = bool(t.value), r.value, rep.value, local.value
        n = ctypes.c_int()
        _check(lib.shardsync_num_tensors(self._h, ctypes.byref(n)))
        self._tensors = {}
        for i in range(n.value):
            name, dtype = ctypes.c_char_p(), ctypes.c_char_p()
            ndim, shape, slot, nbytes = ctypes.c_int(), ctypes.POINTER(ctypes.c_int64)(), ctypes.c_void_p(), ctypes.c_int64()
            _check(lib.shardsync_tensor(self._h, i, ctypes.byref(name), ctypes.byref(dtype), ctypes.byref(ndim),
                                        ctypes.byref(shape), ctypes.byref(slot), ctypes.byref(nbytes)))
            info = TensorInfo(name.value.decode(), dtype.value.decode(), [shape[k] for k in range(ndim.value)],
                              nbytes.value, slot.value)
            self._tensors[info.name] = info

    def tensors(self):
        """{name: TensorInfo} of the tensors this rank binds, in the library's order."""
        return dict(self._tensors)

    def slot(self, name):
        """A view of tensor `name`'s place in the registered region: keep the tensor there and it
        moves in place (no copy) with any transport; the caller's own CUDA tensors move in place
        where the transport maps them (docs/library.md). Host memory: a numpy array (bf16 appears
        as uint16); CUDA memory: a torch tensor (bf16 as torch.bfloat16)."""
        import numpy as np
        info = self._tensors.get(name)
        if info is None:
            raise Error(f"{name}: (name): a tensor of this rank (Session.tensors() lists them)")
        if self.memory == "cuda":
            import torch
            typestr = {"bf16": "<u2", "f16": "<f2", "f32": "<f4"}[info.dtype]

            class _Device:  # the CUDA array interface over the slot
                __cuda_array_interface__ = {"shape": tuple(info.shape), "typestr": typestr, "data": (info._slot, False),
                                            "version": 3, "strides": None}

            t = torch.as_tensor(_Device(), device="cuda")
            return t.view(torch.bfloat16) if info.dtype == "bf16" else t
        dtype = {"bf16": np.uint16, "f16": np.float16, "f32": np.float32}[info.dtype]
        count = info.nbytes // np.dtype(dtype).itemsize
        if count == 0:
            return np.empty(info.shape, dtype=dtype)
        buf = (ctypes.c_char * info.nbytes).from_address(info._slot)
        return np.frombuffer(buf, dtype=dtype, count=count).reshape(info.shape)

    def bind(self, name, tensor, dtype=None):
        """The caller's memory for tensor `name` (a torch tensor, CPU or CUDA, or a numpy array;
        bf16 numpy arrays as uint16 with dtype="bfloat16"). Checked against the tensor's dtype,
        shape and device; each tensor once. A trainer's bound tensors are read at every publish,
        an inference rank's written at every pull."""
        try:
            ptr, dt, shape, memory = _describe(tensor, dtype)
        except Error as e:
            raise Error(f"{name}: {e}") from None
        dt = _DTYPES.get(dt, dt)
        arr = (ctypes.c_int64 * len(shape))(*shape)
        _check(_library().shardsync_bind(self._h, name.encode(), ctypes.c_void_p(ptr), dt.encode(), len(shape), arr,
                                         memory.encode()))
        self._bound[name] = tensor  # kept alive while the session may read or write it

    def publish(self, version):
        """Trainer ranks: every live receiver reads `version` of the bound tensors; returns when
        they all have (only then may the optimizer write them again). With CUDA tensors it
        orders after the caller's current stream (the optimizer's writes land first)."""
        if self.memory == "cuda":
            import torch
            torch.cuda.current_stream().synchronize()
        _check(_library().shardsync_publish(self._h, ctypes.c_uint64(version)))

    def pull(self, version):
        """Inference ranks: fill the bound parameters with `version` (run no inference on them meanwhile)."""
        _check(_library().shardsync_pull(self._h, ctypes.c_uint64(version)))

    @property
    def held_version(self):
        """(version, partial): the version the parameters hold (0: none) and whether a sync left them partial."""
        v, p = ctypes.c_uint64(), ctypes.c_int()
        _check(_library().shardsync_held_version(self._h, ctypes.byref(v), ctypes.byref(p)))
        return v.value, bool(p.value)

    def last_sync(self):
        """This rank's last sync: seconds, bytes (received or served), bytes staged; with checksum=True the pieces
        hashed, those whose sums differed (a pull with any raises) and the seconds spent hashing."""
        s, b, st = ctypes.c_double(), ctypes.c_int64(), ctypes.c_int64()
        _check(_library().shardsync_last_sync(self._h, ctypes.byref(s), ctypes.byref(b), ctypes.byref(st)))
        out = {"seconds": s.value, "bytes": b.value, "staged_bytes": st.value}
        pieces, differ, hs = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_double()
        _check(_library().shardsync_last_checksum(self._h, ctypes.byref(pieces), ctypes.byref(differ), ctypes.byref(hs)))
        out.update({"checksum_pieces": pieces.value, "checksum_differ": differ.value, "hash_seconds": hs.value})
        return out

    def close(self):
        """Collective end of the run (every rank)."""
        if self._h:
            h, self._h = self._h, None
            _open_sessions.discard(self)
            _check(_library().shardsync_close(h))

    def _free(self):
        if self._h:
            h, self._h = self._h, None
            _open_sessions.discard(self)
            _library().shardsync_free(h)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is None:
            self.close()
        else:
            self._free()  # an error on this rank: leave without the collective end
