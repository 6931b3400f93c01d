#!/usr/bin/env python3
"""What RL users run instead of shardsync: plain PyTorch weight transfer from one trainer
process to the TP ranks of one inference replica, timed and verified, written as a result
JSON that `shardsync report` reads next to shardsync's own engines.

Peers (--peer, comma-separated; each runs in the same launch, on the same processes):
  bucketed-ipc    trainer packs tensors into one bucket shared ONCE over CUDA IPC; per round
                  it signals, inference copies its TP slices out into merged params
  ipc-per-tensor  one CUDA IPC handle per trainer tensor, sent and opened on every sync
  nccl-bcast      torch.distributed NCCL broadcast of each tensor from rank 0
  nccl-bucket     the same with flattened buckets of --bucket bytes
Process 0 is the trainer, 1..N the inference TP ranks; one GPU visible: all on cuda:0
(colocated), >= N+1 GPUs: process i on cuda:i. See README.md beside this file.
"""
import argparse, datetime, json, os, socket, statistics, sys, time, traceback

PEERS = ("bucketed-ipc", "ipc-per-tensor", "ipc-kept", "ipc-kept-foreach", "nccl-bcast", "nccl-bucket")
QWEN3_8B = (16_381_470_720, 399)  # bytes, tensors: checked when the whole qwen3-8b is used
ALIGN = 128                        # elements (256 B) between tensors in a bucket: aligned copies
POISON = 0x7FFF                    # a bf16 NaN; an element no sync wrote keeps it and is caught
WAIT_S = 1800                      # a process waiting longer than this for a message gives up

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.multiprocessing.reductions import reduce_tensor
except ImportError:
    torch = None


class Refused(Exception):
    """A request this program does not handle: message, exit code 2."""


# ---------------------------------------------------------------- model and TP layout
def model_spec(path, layers, tp):
    with open(path) as f:
        c = json.load(f)

    def need(field, ok, what):
        if not ok:
            raise Refused(f"{path}: field {field} = {c.get(field)!r}: {what}")

    mt = c.get("model_type")
    need("model_type", mt in ("qwen3", "llama"), "only dense 'qwen3' and 'llama' models are supported")
    need("torch_dtype", c.get("torch_dtype", "bfloat16") == "bfloat16", "only bfloat16 is supported")
    for f in ("attention_bias", "mlp_bias"):
        need(f, not c.get(f), "biases are not supported")
    H, V, I, nh = c["hidden_size"], c["vocab_size"], c["intermediate_size"], c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or nh
    hd = c.get("head_dim") or H // nh
    L = c["num_hidden_layers"] if layers is None else min(layers, c["num_hidden_layers"])
    need("num_attention_heads", nh % tp == 0, f"not divisible by inference TP {tp}")
    need("intermediate_size", I % tp == 0, f"not divisible by inference TP {tp}")
    need("num_key_value_heads", kv % tp == 0 or tp % kv == 0, f"neither divides nor is a multiple of TP {tp}")
    need("vocab_size", V > -(-V // tp) * (tp - 1), f"too small for TP {tp}")
    # (HF name, shape, kind, merged vLLM parameter it lands in)
    ts = [("model.embed_tokens.weight", (V, H), "vocab", "model.embed_tokens.weight")]
    for i in range(L):
        p = f"model.layers.{i}."
        a, m = p + "self_attn.", p + "mlp."
        ts.append((p + "input_layernorm.weight", (H,), "rep", p + "input_layernorm.weight"))
        for k, rows in (("q", nh * hd), ("k", kv * hd), ("v", kv * hd)):
            ts.append((a + k + "_proj.weight", (rows, H), k, a + "qkv_proj.weight"))
        ts.append((a + "o_proj.weight", (H, nh * hd), "o", a + "o_proj.weight"))
        if mt == "qwen3":
            ts += [(a + n, (hd,), "rep", a + n) for n in ("q_norm.weight", "k_norm.weight")]
        ts.append((p + "post_attention_layernorm.weight", (H,), "rep", p + "post_attention_layernorm.weight"))
        for k, shape in (("gate", (I, H)), ("up", (I, H)), ("down", (H, I))):
            ts.append((m + k + "_proj.weight", shape, k, m + ("down_proj.weight" if k == "down" else "gate_up_proj.weight")))
    ts.append(("model.norm.weight", (H,), "rep", "model.norm.weight"))
    if not c.get("tie_word_embeddings", False):
        ts.append(("lm_head.weight", (V, H), "vocab", "lm_head.weight"))
    groups = {}
    for idx, (_, _, kind, merged) in enumerate(ts):
        groups.setdefault(merged, []).append((kind, idx))
    return dict(tensors=ts, groups=groups, H=H, V=V, I=I, nh=nh, kv=kv, hd=hd, L=L, model_type=mt,
                bytes=2 * sum(numel(s) for _, s, _, _ in ts))


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def layout(s, r, N):
    """vLLM-style TP rank r of N: merged parameter shapes, and for each trainer tensor the
    piece (merged name, dst row offset, src dim or None, src start, length) it contributes."""
    H, V, I, nh, kv, hd = (s[k] for k in ("H", "V", "I", "nh", "kv", "hd"))
    vc = -(-V // N)
    v0, vl = r * vc, min(V, (r + 1) * vc) - r * vc
    qh, kh = nh // N, (kv // N if kv >= N else 1)
    k0 = r * kh if kv >= N else r * kv // N  # fewer kv heads than ranks: replicate, as vLLM does
    io, oc = I // N, nh * hd // N
    shapes, pieces = {}, []
    for _, shape, kind, m in s["tensors"]:
        piece, shp = {
            "vocab": ((m, 0, 0, v0, vl), (vl, H)),
            "q": ((m, 0, 0, r * qh * hd, qh * hd), ((qh + 2 * kh) * hd, H)),
            "k": ((m, qh * hd, 0, k0 * hd, kh * hd), None),
            "v": ((m, (qh + kh) * hd, 0, k0 * hd, kh * hd), None),
            "gate": ((m, 0, 0, r * io, io), (2 * io, H)),
            "up": ((m, io, 0, r * io, io), None),
            "o": ((m, 0, 1, r * oc, oc), (H, oc)),
            "down": ((m, 0, 1, r * io, io), (H, io)),
            "rep": ((m, 0, None, 0, 0), shape),
        }[kind]
        if shp:
            shapes[m] = shp
        pieces.append(piece)
    return shapes, pieces


def piece_views(src, merged, piece):
    """(destination slice, source slice) of one piece."""
    m, off, dim, start, n = piece
    dst = merged[m]
    if dim is None:
        return dst, src
    if dim == 0:
        return dst[off:off + n], src[start:start + n]
    return dst, src[:, start:start + n]


def copy_piece(src, merged, piece):
    dst, s = piece_views(src, merged, piece)
    dst.copy_(s)


def expected(s, full, r, N):
    """The merged parameter of rank r built a second way (chunk/split/cat, not the pieces),
    so that a wrong piece table is caught too."""
    if "q" in full:
        kv, hd, H = s["kv"], s["hd"], s["H"]
        pick = (lambda t: t.view(kv, hd, H).chunk(N)[r]) if kv >= N else (lambda t: t.view(kv, hd, H)[r * kv // N])
        return torch.cat([full["q"].chunk(N)[r], pick(full["k"]).reshape(-1, H), pick(full["v"]).reshape(-1, H)])
    if "gate" in full:
        return torch.cat([full["gate"].chunk(N)[r], full["up"].chunk(N)[r]])
    (kind, t), = full.items()
    if kind == "vocab":
        return t.split(-(-t.shape[0] // N))[r]
    return t.chunk(N, dim=1)[r] if kind in ("o", "down") else t


def fill(t, idx, version):
    """Deterministic random bits from (tensor index, version): any bf16 pattern, NaNs
    included, since every check compares bits."""
    g = torch.Generator(device=t.device)
    g.manual_seed((idx * 1_000_003 + version * 7_919 + 12_345) % (1 << 62))
    t.view(torch.int16).random_(-32768, 32768, generator=g)
    return t


def plan_buckets(s, cap):
    """Greedy, in order: lists of (tensor index, element offset); cap is in elements."""
    buckets, cur, off = [], [], 0
    for idx, (_, shape, _, _) in enumerate(s["tensors"]):
        n = numel(shape)
        if cur and off + n > cap:
            buckets.append(cur)
            cur, off = [], 0
        cur.append((idx, off))
        off += -(-n // ALIGN) * ALIGN
    return buckets + [cur]


def used(s, b):
    """Elements of a bucket that round b fills (the tail of the last round stays unsent)."""
    return max(off + numel(s["tensors"][idx][1]) for idx, off in b)


def bucket_elems(s, buckets):
    return max(used(s, b) for b in buckets)


# ---------------------------------------------------------------- processes
def device_of(a, rank):
    return "cpu" if a.device == "cpu" else f"cuda:{rank if a.separate else 0}"


def sync(dev):
    if dev != "cpu":
        torch.cuda.synchronize(dev)


def measure_link(dev, other):
    """One large copy, median of 5: to the inference GPU when it is another one, else on
    the trainer's own GPU (on cpu: a host memcpy)."""
    n = (2 << 30) if dev != "cpu" else (256 << 20)
    src = torch.empty(n, dtype=torch.uint8, device=dev).fill_(1)
    dst = torch.empty(n, dtype=torch.uint8, device=other)
    times = []
    for i in range(6):
        sync(dev), sync(other)
        t0 = time.perf_counter()
        dst.copy_(src)
        sync(dev), sync(other)
        if i:
            times.append(time.perf_counter() - t0)  # wall time around synchronize: also right across devices
    t = statistics.median(times)
    del src, dst
    if dev != "cpu":
        torch.cuda.empty_cache()
    # link_gbps: one direction, bytes of the buffer / s (as shardsync reports its link);
    # read_plus_write counts each byte twice (read + written), the figure memory specs quote.
    return n / t / 1e9, 2 * n / t / 1e9


class Trainer:
    def __init__(self, a, s, ctl, up):
        self.a, self.s, self.ctl, self.up = a, s, ctl, up
        self.dev = device_of(a, 0)
        self.w = [torch.empty(shape, dtype=torch.bfloat16, device=self.dev) for _, shape, _, _ in s["tensors"]]
        if self.dev == "cpu":
            for t in self.w:
                t.share_memory_()  # host stand-in for CUDA IPC: the inference processes map it
        self.version, self.early = 0, []

    def send(self, *msg):
        for q in self.ctl:
            q.put(msg)

    def wait(self, kind):
        """One message of `kind` from every inference rank: their payloads in rank order."""
        got, later = {}, []
        while len(got) < len(self.ctl):  # a fast rank may already be a step ahead: keep that for later
            rank, k, *payload = self.early.pop(0) if self.early else self.up.get(timeout=WAIT_S)
            if k != kind or rank in got:
                later.append((rank, k, *payload))
            else:
                got[rank] = payload
            if len(later) > 4 * len(self.ctl):
                raise RuntimeError(f"trainer: waiting for {kind!r}, got {later}")
        self.early = later + self.early
        return [got[r] for r in sorted(got)]

    def pack(self, bucket, b):
        for idx, off in b:
            t = self.w[idx]
            bucket[off:off + t.numel()].copy_(t.view(-1))

    def run(self, peer):
        a, s = self.a, self.s
        cap = max(a.bucket // 2, max(numel(sh) for _, sh, _, _ in s["tensors"]))
        buckets = plan_buckets(s, cap)
        if cap > a.bucket // 2 and peer in ("bucketed-ipc", "nccl-bucket"):
            print(f"peers: {peer}: bucket grown from {a.bucket} to {2 * cap} B to hold the largest tensor", flush=True)
        nb = bucket_elems(s, buckets) if peer in ("bucketed-ipc", "nccl-bucket") else 0
        bucket = torch.empty(nb, dtype=torch.bfloat16, device=self.dev)
        payload = None
        if peer == "bucketed-ipc":
            if self.dev == "cpu":
                bucket.share_memory_()
            payload = bucket  # pickled once through the queue: a CUDA IPC handle, opened once there
        elif peer.startswith("ipc-kept"):
            payload = self.w  # every tensor's handle, sent once, opened once there and kept
        self.send("peer", peer, buckets, nb, payload)
        self.wait("peer-ready")
        rows = []
        for i in range(a.warmup + a.syncs):
            self.version += 1
            for idx, t in enumerate(self.w):  # the "optimizer step": outside the timed region
                fill(t, idx, self.version)
            sync(self.dev)
            self.send("sync", self.version)
            self.wait("ready")  # merged params poisoned on every inference rank
            pack_s, t0 = 0.0, time.perf_counter()
            if peer == "bucketed-ipc":
                copy_s = [0.0] * len(self.ctl)
                for bi, b in enumerate(buckets):
                    tp = time.perf_counter()
                    self.pack(bucket, b)
                    sync(self.dev)  # the bucket must be complete before another process reads it
                    pack_s += time.perf_counter() - tp
                    self.send("round", bi)
                    copy_s = [c + p[0] for c, p in zip(copy_s, self.wait("done"))]
            elif peer == "ipc-per-tensor":
                # as naive users do: a fresh handle per tensor per sync (reduce_tensor), opened there
                self.send("tensors", [reduce_tensor(t) for t in self.w])
                copy_s = [p[0] for p in self.wait("done")]
            elif peer.startswith("ipc-kept"):
                self.send("go", i)  # the weights are written: read them through the kept handles
                copy_s = [p[0] for p in self.wait("done")]
            else:
                ev = []
                for b in buckets if peer == "nccl-bucket" else [[(j, 0)] for j in range(len(self.w))]:
                    if peer == "nccl-bucket":
                        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        e0.record()
                        self.pack(bucket, b)
                        e1.record()
                        ev.append((e0, e1))
                        dist.broadcast(bucket[:used(self.s, b)], 0)
                    else:
                        dist.broadcast(self.w[b[0][0]], 0)
                sync(self.dev)
                pack_s = sum(e0.elapsed_time(e1) for e0, e1 in ev) / 1e3
                copy_s = [p[0] for p in self.wait("done")]
            t = time.perf_counter() - t0
            ver = self.wait("verified")
            rows.append(dict(index=i, warmup=i < a.warmup, time_s=t, pack_s=pack_s, copy_s=copy_s,
                             wrong=sum(v[0] for v in ver), verify_s=[v[1] for v in ver]))
            print(f"peers: {peer} sync {i}{' (warm-up)' if i < a.warmup else ''}: {t:.4f} s, "
                  f"wrong {rows[-1]['wrong']}", flush=True)
        self.send("end")
        self.wait("released")
        del bucket, payload
        if self.dev != "cpu":
            torch.cuda.empty_cache()
        return rows, nb * 2, len(buckets)


def inference(a, s, rank, ctl, up):
    r, N = rank - 1, a.inference_tp
    dev = device_of(a, rank)
    shapes, pieces = layout(s, r, N)
    merged = {m: torch.empty(sh, dtype=torch.bfloat16, device=dev) for m, sh in shapes.items()}  # the live weights
    skip = 1 if a.inject_fault and r == 0 else -1  # testing the verifier: rank 1 never copies tensor 1
    tshape = [sh for _, sh, _, _ in s["tensors"]]
    say = lambda kind, *p: up.put((rank, kind, *p))
    while True:
        msg = ctl.get(timeout=WAIT_S)
        if msg[0] == "quit":
            return
        _, peer, buckets, nb, bucket = msg  # bucketed-ipc: the IPC handle was opened right here, once
        if peer == "nccl-bucket":
            bucket = torch.empty(nb, dtype=torch.bfloat16, device=dev)
        recv = torch.empty(max(numel(sh) for sh in tshape), dtype=torch.bfloat16, device=dev) if peer == "nccl-bcast" else None
        kept_views = None
        if peer == "ipc-kept-foreach":  # every (final slice, source slice) pair, made once
            kept_views = ([], [])
            for idx, t in enumerate(bucket):
                if idx != skip:
                    d, sv = piece_views(t, merged, pieces[idx])
                    kept_views[0].append(d)
                    kept_views[1].append(sv)
        say("peer-ready")
        told = False  # a broken peer's wrong parameters named once
        while True:
            msg = ctl.get(timeout=WAIT_S)
            if msg[0] == "end":
                break
            version = msg[1]
            for t in merged.values():
                t.view(torch.int16).fill_(POISON)
            sync(dev)
            say("ready")
            if peer == "bucketed-ipc":
                for _ in buckets:
                    bi = ctl.get(timeout=WAIT_S)[1]
                    t0 = time.perf_counter()
                    for idx, off in buckets[bi]:
                        if idx != skip:
                            copy_piece(bucket[off:off + numel(tshape[idx])].view(tshape[idx]), merged, pieces[idx])
                    sync(dev)
                    say("done", time.perf_counter() - t0)
            elif peer.startswith("ipc-kept"):
                # the strongest plain PyTorch design: handles opened once (the peer's payload, kept
                # across syncs); each sync copies every tensor straight into its final slice, one
                # copy_ each, or all in one torch._foreach_copy_
                ctl.get(timeout=WAIT_S)
                t0 = time.perf_counter()
                if peer == "ipc-kept":
                    for idx, t in enumerate(bucket):
                        if idx != skip:
                            copy_piece(t, merged, pieces[idx])
                else:
                    dsts, srcs = kept_views
                    torch._foreach_copy_(dsts, srcs)
                sync(dev)
                say("done", time.perf_counter() - t0)
            elif peer == "ipc-per-tensor":
                handles = ctl.get(timeout=WAIT_S)[1]
                t0 = time.perf_counter()  # copy-out time includes opening the handles
                src = [fn(*args) for fn, args in handles]
                for idx, t in enumerate(src):
                    if idx != skip:
                        copy_piece(t, merged, pieces[idx])
                sync(dev)
                del src, handles  # the handles close here: the next sync opens them again
                say("done", time.perf_counter() - t0)
            else:
                ev = []
                for b in buckets if peer == "nccl-bucket" else [[(j, 0)] for j in range(len(tshape))]:
                    buf = bucket[:used(s, b)] if peer == "nccl-bucket" else recv[:numel(tshape[b[0][0]])]
                    dist.broadcast(buf, 0)
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record()
                    for idx, off in b:
                        if idx != skip:
                            copy_piece(buf[off:off + numel(tshape[idx])].view(tshape[idx]), merged, pieces[idx])
                    e1.record()
                    ev.append((e0, e1))
                sync(dev)
                copy_ms = sum(e0.elapsed_time(e1) for e0, e1 in ev)
                say("done", copy_ms / 1e3)
            t0, wrong, named = time.perf_counter(), 0, []  # verification: outside the timed region
            for m, srcs in s["groups"].items():
                full = {kind: fill(torch.empty(tshape[idx], dtype=torch.bfloat16, device=dev), idx, version)
                        for kind, idx in srcs}
                exp, got = expected(s, full, r, N), merged[m]
                bad = got.numel() if exp.shape != got.shape else int((got.view(torch.int16) != exp.view(torch.int16)).sum())
                if bad and len(named) < 5:
                    named.append(f"{m} ({bad} of {got.numel()})")
                wrong += bad
                del full, exp
            if named and not told:
                print(f"peers: {peer} rank {rank} version {version}: wrong elements in " + ", ".join(named), flush=True)
                told = True
            sync(dev)
            say("verified", wrong, time.perf_counter() - t0)
        del bucket, recv, kept_views
        if dev != "cpu":
            torch.cuda.empty_cache()
        say("released")


def process_main(rank, a, s, ctl, up, res):
    try:
        dev = device_of(a, rank)
        if dev == "cpu":
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // (a.inference_tp + 1)))
        else:
            torch.cuda.set_device(dev)
        if a.nccl:
            dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{a.port}", rank=rank,
                                    world_size=a.inference_tp + 1, device_id=torch.device(dev))
        if rank:
            inference(a, s, rank, ctl[rank - 1], up)
        else:
            tr = Trainer(a, s, ctl, up)
            link = measure_link(tr.dev, device_of(a, 1))
            out = {p: tr.run(p) for p in a.peers}
            tr.send("quit")
            name = torch.cuda.get_device_name(tr.dev) if tr.dev != "cpu" else "cpu"
            res.put(("result", link, name, out))
        if a.nccl:
            dist.destroy_process_group()
    except BaseException:
        res.put(("error", rank, traceback.format_exc()))
        sys.exit(1)


# ---------------------------------------------------------------- main: options, launch, JSON
def parse_bytes(text):
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    try:
        return int(float(t[:-1] if mult > 1 else t) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (bytes, or with K/M/G/T, e.g. 4G, 256M)")


def git_sha():
    """The project's commit (bench/provenance.py), never that of a repository around a copy."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from provenance import project_commit
    return project_commit()


def engine_json(peer, rows, a, moved, nb, rounds):
    timed = [r for r in rows if not r["warmup"]] or rows
    ts = [r["time_s"] for r in timed]
    mean = lambda xs: sum(xs) / len(xs) if xs else 0.0
    avg = mean(ts)
    notes = {
        "bucketed-ipc": f"{nb} B bucket shared once over {'CUDA IPC' if a.device == 'cuda' else 'host shared memory'} "
                        f"and opened once; {rounds} round(s) per sync: the trainer packs it, signals, inference copies its slices out",
        "ipc-per-tensor": "one IPC handle per trainer tensor, sent and opened every sync (reduce_tensor/rebuild), "
                          "then closed; inference copies its slices out",
        "nccl-bcast": "torch.distributed NCCL broadcast of every tensor from rank 0 into a receive buffer; "
                      "inference copies its slices out",
        "nccl-bucket": f"tensors packed into a {nb} B bucket, NCCL broadcast per bucket ({rounds} per sync); inference copies its slices out",
        "ipc-kept": "one IPC handle per trainer tensor, opened once and kept; each sync copies every tensor straight into its "
                    "final slice of the merged parameter (one copy_ each)",
        "ipc-kept-foreach": "as ipc-kept, the copies of a sync as one torch._foreach_copy_",
    }[peer]
    return {"engine": "peer:" + peer, "timed_syncs": len(timed),
            "time_s": {"min": min(ts), "avg": avg, "median": statistics.median(ts), "max": max(ts)},
            "bytes_moved": moved, "aggregate_gbps": moved / avg / 1e9 if avg > 0 else 0.0,
            "pack_s": mean([r["pack_s"] for r in timed]),
            "transfer_s": mean([c for r in timed for c in r["copy_s"]]),
            "gather_s": 0, "process_s": 0,
            "verify_s": mean([v for r in timed for v in r["verify_s"]]),
            "wrong": sum(r["wrong"] for r in rows),
            "syncs": [{"index": r["index"], "warmup": r["warmup"], "time_s": r["time_s"]} for r in rows],
            "notes": notes}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer", default=",".join(PEERS),
                    help="comma-separated peers to measure (default: all): " + ", ".join(PEERS))
    ap.add_argument("--config", "--model-config", dest="config", default="configs/models/qwen3-8b.json",
                    help="HuggingFace config.json of a dense qwen3/llama model (default %(default)s)")
    ap.add_argument("--inference-tp", type=int, default=1, help="inference TP ranks N (processes 1..N)")
    ap.add_argument("--syncs", type=int, default=5, help="timed syncs per peer (default 5)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed syncs first, still verified (default 1)")
    ap.add_argument("--bucket", type=parse_bytes, default=4 << 30,
                    help="bucket bytes, e.g. 4G, 256M (default 4G; grown to fit the largest tensor)")
    ap.add_argument("--layers", type=int, default=None, help="use only the first K layers (quick tests)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: host shared memory instead of CUDA IPC, a functional test only (nccl peers skip)")
    ap.add_argument("--json", help="write the result JSON here (for `shardsync report`)")
    ap.add_argument("--skip-missing", action="store_true", help="exit 0 when PyTorch is not installed")
    ap.add_argument("--inject-fault", action="store_true",
                    help="testing the verifier: inference rank 1 skips one tensor; the run must fail")
    a = ap.parse_args()
    if torch is None:
        print("peers: PyTorch is not installed here; skipping", file=sys.stderr)
        return 0 if a.skip_missing else 2
    peers = [p.strip() for p in a.peer.split(",") if p.strip()]
    bad = [p for p in peers if p not in PEERS]
    if bad or not peers or a.inference_tp < 1 or a.syncs < 1 or a.warmup < 0 or a.bucket < 1:
        raise Refused(f"bad option: peer(s) {bad} (known: {', '.join(PEERS)}), or a count below 1")
    try:
        s = model_spec(a.config, a.layers, a.inference_tp)
    except (OSError, ValueError, KeyError) as e:
        raise Refused(f"{a.config}: cannot read the model config: {e!r}")
    stem = os.path.splitext(os.path.basename(a.config))[0]
    ntens = len(s["tensors"])
    print(f"peers: {stem}: {ntens} tensors, {s['bytes']:,} bytes bf16 ({s['L']} layer(s))")
    if stem == "qwen3-8b" and a.layers is None and (s["bytes"], ntens) != QWEN3_8B:
        print(f"peers: internal error: qwen3-8b should be {QWEN3_8B[0]:,} bytes in {QWEN3_8B[1]} tensors", file=sys.stderr)
        return 1
    gpus = torch.cuda.device_count() if a.device == "cuda" else 0
    if a.device == "cuda" and gpus == 0:
        raise Refused("no CUDA device visible (use --device cpu for a functional test)")
    N = a.inference_tp
    a.separate = gpus >= N + 1
    placement = ("host memory, every process (functional test)" if a.device == "cpu"
                 else "process i on cuda:i" if a.separate else "one GPU shared by every process")
    skipped = {}
    for p in peers:
        if p.startswith("nccl") and not a.separate:
            skipped[p] = ("needs CUDA (nccl)" if a.device == "cpu" else
                          f"needs one GPU per process ({N + 1}), {gpus} visible: NCCL refuses two ranks on one GPU")
            print(f"peers: skipping {p}: {skipped[p]}")
    a.peers = [p for p in peers if p not in skipped]
    a.nccl = any(p.startswith("nccl") for p in a.peers)
    moved = 2 * sum(numel(sh) for r in range(N) for sh in layout(s, r, N)[0].values())
    if not a.peers:
        print("peers: nothing to run")
        return 0
    with socket.socket() as so:  # a free port for NCCL's rendezvous
        so.bind(("127.0.0.1", 0))
        a.port = so.getsockname()[1]

    ctx = mp.get_context("spawn")
    ctl, up, res = [ctx.Queue() for _ in range(N)], ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=process_main, args=(i, a, s, ctl, up, res)) for i in range(N + 1)]
    for p in procs:
        p.start()
    result = None
    while result is None:  # wait for the trainer's result; a process that dies ends the run
        try:
            msg = res.get(timeout=1)
        except Exception:
            msg = None
        if msg and msg[0] == "error":
            print(f"peers: process {msg[1]} failed:\n{msg[2]}", file=sys.stderr)
        elif msg:
            result = msg
        if msg and msg[0] == "error" or any(p.exitcode not in (None, 0) for p in procs):
            for p in procs:
                if p.is_alive():
                    p.terminate()
            print("peers: a process failed; stopped", file=sys.stderr)
            return 1
    for p in procs:
        p.join(timeout=120)
    _, (link, rw), devname, out = result

    engines = []
    for peer, (rows, nb, rounds) in out.items():
        engines.append(engine_json(peer, rows, a, moved, nb, rounds))
    bucket_bytes = max([o[1] for o in out.values()] or [0]) or a.bucket
    doc = {"tool": "shardsync-peers", "schema_version": 1, "git_sha": git_sha(),
           "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "host": socket.gethostname(), "memory": "cuda" if a.device == "cuda" else "host",
           "model_bytes": s["bytes"],
           "link_gbps": link,                    # bytes copied / s, one direction (shardsync's convention)
           "copy_gbps_read_plus_write": rw,      # 2 x bytes / s: each byte read once and written once
           "link_path": "trainer GPU -> inference GPU 1" if a.separate else "on the trainer's device",
           "device_rank0": devname, "argv": sys.argv,
           "config": {"model": stem, "trainer": "tp1", "inference": f"tp{N}", "replicas": 1, "ranks": N + 1,
                      "bucket_bytes": bucket_bytes, "placement": placement, "syncs": a.syncs, "warmup": a.warmup,
                      "layers": a.layers},
           "skipped": [{"peer": p, "why": w} for p, w in skipped.items()],
           "engines": engines}
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"peers: wrote {a.json}")
    print(f"\n{stem}, inference tp{N}, {placement}; {moved / 1e9:.3f} GB moved per sync; "
          f"link {link:.1f} GB/s ({rw:.1f} read+write)")
    print(f"{'peer':<16}{'avg s':>10}{'median s':>10}{'min s':>10}{'max s':>10}{'GB/s':>9}{'% link':>8}{'wrong':>8}")
    for e in engines:
        print(f"{e['engine'][5:]:<16}{e['time_s']['avg']:>10.4f}{e['time_s']['median']:>10.4f}{e['time_s']['min']:>10.4f}"
              f"{e['time_s']['max']:>10.4f}"
              f"{e['aggregate_gbps']:>9.2f}{100 * e['aggregate_gbps'] / link:>8.1f}{e['wrong']:>8}")
    wrong = sum(e["wrong"] for e in engines)
    if wrong:
        print(f"peers: FAILED: {wrong} element(s) differ from what the trainer sent", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Refused as e:
        print(f"peers: {e}", file=sys.stderr)
        sys.exit(2)
