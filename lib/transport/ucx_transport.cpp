// UCX implementation: one ucp worker per rank, endpoints to every peer from worker
// addresses exchanged over MPI at start-up, the exported region mapped with ucp_mem_map
// and its rkey exchanged once; ucp_get_nbx for one-sided reads; tagged messages (tag =
// magic << 32 | sender) for control. Endpoints use peer error handling, so a dead peer
// surfaces as PeerFailure instead of a hang.
#include "transport/ucx_transport.hpp"

#include <unistd.h>

#include <chrono>
#include <thread>
#include <cstdio>

#include "transport/wire.hpp"

namespace shardsync {

namespace {

constexpr uint64_t kCtrlTagHigh = uint64_t(0x5353u) << 32;
constexpr uint64_t kCtrlTagMask = 0xffffffff00000000ULL;


// Waits for a request with progress; returns its final status.
ucs_status_t wait_request(ucp_worker_h worker, void* req) {
  if (req == nullptr) return UCS_OK;
  if (UCS_PTR_IS_ERR(req)) return UCS_PTR_STATUS(req);
  ucs_status_t st;
  while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) ucp_worker_progress(worker);
  ucp_request_free(req);
  return st;
}

}  // namespace

UcxTransport::UcxTransport() {
  ucp_config_t* config = nullptr;
  UCS_CHECK(ucp_config_read(nullptr, nullptr, &config));
  // UCX widens a CUDA registration to the whole allocation, with the allocation's bounds
  // from its memory-type cache. That cache learns of allocations through hooks that miss a
  // statically linked CUDA runtime (ours, and most applications'), so it answers "host" with
  // no bounds and ucp_mem_map fails on the region [0x0..0x0] (seen with UCX 1.22 on an
  // H200). Our regions are whole allocations already: register exactly what is asked,
  // unless the user chose otherwise. A UCX without the option ignores it.
  if (!getenv("UCX_MEMTYPE_REG_WHOLE_ALLOC_TYPES")) (void)ucp_config_modify(config, "MEMTYPE_REG_WHOLE_ALLOC_TYPES", "");
  // UCX's cuda_ipc transport offers gets (reads of a peer GPU's memory) only where it counts
  // NVLinks from GPU 0 (CUDA_IPC_ENABLE_GET_ZCOPY=auto); on a GPU without them, one H200 of
  // a VM say, every ucp_get of CUDA memory fell back to software emulation over shared
  // memory at about 0.8 GB/s (results/gpu/ucx-cuda/). shardsync's pulls are gets: ask for
  // them, unless the user chose otherwise. A UCX without the option ignores it.
  if (!getenv("UCX_CUDA_IPC_ENABLE_GET_ZCOPY")) (void)ucp_config_modify(config, "CUDA_IPC_ENABLE_GET_ZCOPY", "y");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_TAG;
  ucs_status_t st = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  UCS_CHECK(st);
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  UCS_CHECK(ucp_worker_create(context_, &wp, &worker_));
}

UcxTransport::~UcxTransport() {
  // Non-collective cleanup only; after an error the process aborts anyway.
  for (auto& p : peers_)
    if (p.rkey) ucp_rkey_destroy(p.rkey);
  if (worker_) ucp_worker_destroy(worker_);
  if (export_memh_) ucp_mem_unmap(context_, export_memh_);
  if (landing_memh_) ucp_mem_unmap(context_, landing_memh_);
  if (context_) ucp_cleanup(context_);
}

std::string UcxTransport::describe() const {
  return "ucx " + ucx_version() + " (ucp_get_nbx, tag messages" + (peer_errors_ ? ", peer error handling" : "") +
         (tls_.empty() ? "" : ", UCX_TLS=" + tls_) + ")";
}

bool UcxTransport::supports(MemKind kind) const {
  if (kind == MemKind::kHost) return true;
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucp_context_query(context_, &attr) != UCS_OK) return false;
  return (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
}

void UcxTransport::bootstrap(MPI_Comm world, const Registration& reg) {
  if (!supports(reg.kind)) throw Error("ucx transport: this UCX has no support for the requested memory kind");
  if (const char* tls = getenv("UCX_TLS")) tls_ = tls;
  if (const char* pe = getenv("SHARDSYNC_UCX_PEER_ERRORS")) peer_errors_ = std::string(pe) == "1";
  MPI_CHECK(MPI_Comm_dup(world, &comm_));
  int size = 0;
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size));

  map_memory(reg);

  // Worker addresses.
  ucp_address_t* addr = nullptr;
  size_t addr_len = 0;
  UCS_CHECK(ucp_worker_get_address(worker_, &addr, &addr_len));
  std::vector<int> lens(static_cast<size_t>(size)), displs(static_cast<size_t>(size));
  int my_len = int(addr_len);
  MPI_CHECK(MPI_Allgather(&my_len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm_));
  int total = 0;
  for (int i = 0; i < size; ++i) {
    displs[size_t(i)] = total;
    total += lens[size_t(i)];
  }
  std::vector<uint8_t> all(static_cast<size_t>(total));
  MPI_CHECK(MPI_Allgatherv(addr, my_len, MPI_BYTE, all.data(), lens.data(), displs.data(), MPI_BYTE, comm_));
  ucp_worker_release_address(worker_, addr);

  // Rkeys and base addresses of the exported regions.
  void* rkey_buf = nullptr;
  size_t rkey_len = 0;
  if (export_memh_) UCS_CHECK(ucp_rkey_pack(context_, export_memh_, &rkey_buf, &rkey_len));
  int my_rkey_len = int(rkey_len);
  std::vector<int> rlens(static_cast<size_t>(size)), rdispls(static_cast<size_t>(size));
  MPI_CHECK(MPI_Allgather(&my_rkey_len, 1, MPI_INT, rlens.data(), 1, MPI_INT, comm_));
  int rtotal = 0;
  for (int i = 0; i < size; ++i) {
    rdispls[size_t(i)] = rtotal;
    rtotal += rlens[size_t(i)];
  }
  std::vector<uint8_t> rkeys(size_t(std::max(rtotal, 1)));
  MPI_CHECK(MPI_Allgatherv(rkey_buf, my_rkey_len, MPI_BYTE, rkeys.data(), rlens.data(), rdispls.data(), MPI_BYTE, comm_));
  if (rkey_buf) ucp_rkey_buffer_release(rkey_buf);
  uint64_t my_region[2] = {uint64_t(reinterpret_cast<uintptr_t>(reg.export_base)), uint64_t(reg.export_bytes)};
  std::vector<uint64_t> regions(static_cast<size_t>(size) * 2);
  MPI_CHECK(MPI_Allgather(my_region, 2, MPI_UINT64_T, regions.data(), 2, MPI_UINT64_T, comm_));

  peers_.resize(size_t(size));
  for (int i = 0; i < size; ++i)
    connect(i, all.data() + displs[size_t(i)], regions[size_t(i) * 2], size_t(regions[size_t(i) * 2 + 1]),
            rlens[size_t(i)] > 0 ? rkeys.data() + rdispls[size_t(i)] : nullptr, size_t(rlens[size_t(i)]));
}

void UcxTransport::map_memory(const Registration& reg) {
  kind_ = reg.kind;
  landing_ = static_cast<uint8_t*>(reg.landing_base);
  landing_bytes_ = reg.landing_bytes;
  export_base_ = reg.export_base;
  export_bytes_ = reg.export_bytes;
  auto map = [&](void* base, size_t bytes, ucp_mem_h* memh) {
    if (!base || bytes == 0) return;
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = base;
    mp.length = bytes;
    if (reg.kind == MemKind::kCuda) {
      mp.field_mask |= UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
      mp.memory_type = UCS_MEMORY_TYPE_CUDA;
    }
    UCS_CHECK(ucp_mem_map(context_, &mp, memh));
  };
  map(reg.export_base, reg.export_bytes, &export_memh_);
  map(reg.landing_base, reg.landing_bytes, &landing_memh_);
}

void UcxTransport::connect(int peer, const uint8_t* address, uint64_t base, size_t bytes, const uint8_t* rkey,
                           size_t rkey_len) {
  Peer& p = peers_.at(size_t(peer));
  err_args_.push_back(EpErrorArg{this, peer, p.generation});
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(address);
  // Peer error handling excludes transports without failure detection (UCX 1.13's shared
  // memory), so it is on only when asked for (fault-tolerant runs; free on InfiniBand).
  ep.err_mode = peer_errors_ ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  ep.err_handler.cb = [](void* arg, ucp_ep_h, ucs_status_t) {
    auto* a = static_cast<EpErrorArg*>(arg);
    if (a->self->peers_[size_t(a->peer)].generation == a->generation) a->self->mark_failed(a->peer);
  };
  ep.err_handler.arg = &err_args_.back();
  UCS_CHECK(ucp_ep_create(worker_, &ep, &p.ep));
  // SHARDSYNC_UCX_INFO=1: the lanes UCX chose for this endpoint (which transport carries
  // reads of which memory), on stderr: what to look at when reads are slower than the link.
  if (const char* info = getenv("SHARDSYNC_UCX_INFO"); info && std::string(info) == "1" && peer != rank_) {
    std::fprintf(stderr, "# ucx endpoint rank %d -> rank %d:\n", rank_, peer);
    ucp_ep_print_info(p.ep, stderr);
  }
  p.remote_base = base;
  p.remote_bytes = bytes;
  if (rkey && rkey_len > 0) UCS_CHECK(ucp_ep_rkey_unpack(p.ep, rkey, &p.rkey));
}

// Contact bytes: magic, address length, rkey length, region base and size, address, rkey.
namespace {
constexpr uint32_t kContactMagic = 0x53534331u + 7;
struct ContactHeader {
  uint32_t magic;
  uint32_t address_bytes;
  uint32_t rkey_bytes;
  uint32_t pad;
  uint64_t base;
  uint64_t bytes;
};
}  // namespace

std::vector<uint8_t> UcxTransport::contact() const {
  ucp_address_t* addr = nullptr;
  size_t addr_len = 0;
  UCS_CHECK(ucp_worker_get_address(worker_, &addr, &addr_len));
  void* rkey_buf = nullptr;
  size_t rkey_len = 0;
  if (export_memh_) UCS_CHECK(ucp_rkey_pack(context_, export_memh_, &rkey_buf, &rkey_len));
  ContactHeader h{kContactMagic, uint32_t(addr_len), uint32_t(rkey_len), 0,
                  uint64_t(reinterpret_cast<uintptr_t>(export_base_)), uint64_t(export_bytes_)};
  std::vector<uint8_t> out(sizeof h + addr_len + rkey_len);
  std::memcpy(out.data(), &h, sizeof h);
  std::memcpy(out.data() + sizeof h, addr, addr_len);
  if (rkey_len) std::memcpy(out.data() + sizeof h + addr_len, rkey_buf, rkey_len);
  ucp_worker_release_address(worker_, addr);
  if (rkey_buf) ucp_rkey_buffer_release(rkey_buf);
  return out;
}

void UcxTransport::connect_contact(int peer, const std::vector<uint8_t>& c) {
  ContactHeader h{};
  if (c.size() < sizeof h) throw Error("ucx: contact of rank " + std::to_string(peer) + " is truncated");
  std::memcpy(&h, c.data(), sizeof h);
  if (h.magic != kContactMagic || c.size() != sizeof h + h.address_bytes + h.rkey_bytes || h.address_bytes == 0)
    throw Error("ucx: contact of rank " + std::to_string(peer) + " is malformed");
  connect(peer, c.data() + sizeof h, h.base, size_t(h.bytes), h.rkey_bytes ? c.data() + sizeof h + h.address_bytes : nullptr,
          h.rkey_bytes);
}

void UcxTransport::join(int rank, int size, const std::vector<std::vector<uint8_t>>& contacts, const Registration& reg) {
  if (!supports(reg.kind)) throw Error("ucx transport: this UCX has no support for the requested memory kind");
  if (const char* tls = getenv("UCX_TLS")) tls_ = tls;
  if (const char* pe = getenv("SHARDSYNC_UCX_PEER_ERRORS")) peer_errors_ = std::string(pe) == "1";
  rank_ = rank;
  map_memory(reg);
  peers_.assign(size_t(size), Peer{});
  for (int i = 0; i < size && i < int(contacts.size()); ++i)
    if (!contacts[size_t(i)].empty()) connect_contact(i, contacts[size_t(i)]);
}

void UcxTransport::close_peer(int peer) {
  Peer& p = peers_.at(size_t(peer));
  if (p.rkey) ucp_rkey_destroy(p.rkey);
  p.rkey = nullptr;
  if (p.ep) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;  // the old process is gone: nothing to flush
    wait_request(worker_, ucp_ep_close_nbx(p.ep, &param));
  }
  p.ep = nullptr;
}

void UcxTransport::accept_peer(int peer, const std::vector<uint8_t>& c) {
  forget_peer(peer);
  // Sends still queued to the old process finish as cancelled; they belong to the old generation.
  close_peer(peer);
  ++peers_.at(size_t(peer)).generation;
  connect_contact(peer, c);
  failed_.erase(peer);
}

void UcxTransport::send_to_contact(const std::vector<uint8_t>& c, const CtrlMsg& msg) {
  // A temporary peer slot past the world: one message, flushed, then closed.
  int slot = int(peers_.size());
  peers_.emplace_back();
  connect_contact(slot, c);
  std::vector<uint8_t> bytes = encode(msg);
  ucp_request_param_t param{};
  ucs_status_t st =
      wait_request(worker_, ucp_tag_send_nbx(peers_[size_t(slot)].ep, bytes.data(), bytes.size(), kCtrlTagHigh | uint32_t(rank_), &param));
  close_peer(slot);
  peers_.pop_back();
  if (st != UCS_OK) throw_call_error(ucs_status_string(st), "ucp_tag_send_nbx (to a replacement)", __FILE__, __LINE__);
}

void UcxTransport::forget_peer(int peer) {
  failed_.insert(peer);  // its queued sends move to abandoned_ on the next progress()
}

void UcxTransport::check_peer(int peer) const {
  if (failed_.count(peer)) throw PeerFailure(peer, "ucx: peer rank " + std::to_string(peer) + " failed (endpoint error)");
}

Transport::GetId UcxTransport::get(int peer, size_t remote_offset, size_t local_offset, size_t bytes) {
  check_peer(peer);
  const Peer& p = peers_.at(size_t(peer));
  if (!p.rkey || remote_offset + bytes > p.remote_bytes)
    throw Error("ucx transport: get outside rank " + std::to_string(peer) + "'s exported region");
  if (local_offset + bytes > landing_bytes_) throw Error("ucx transport: get outside the landing region");
  // The landing buffer's handle and memory type come with the request: UCX does not look the
  // buffer up in its memory-type cache, which does not know CUDA memory (see the constructor).
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_MEMH | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
  param.memh = landing_memh_;
  param.memory_type = kind_ == MemKind::kCuda ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
  void* req = ucp_get_nbx(p.ep, landing_ + local_offset, bytes, p.remote_base + remote_offset, p.rkey, &param);
  if (UCS_PTR_IS_ERR(req)) {
    ucs_status_t st = UCS_PTR_STATUS(req);
    if (st == UCS_ERR_CONNECTION_RESET || st == UCS_ERR_ENDPOINT_TIMEOUT || st == UCS_ERR_UNREACHABLE) {
      failed_.insert(peer);
      check_peer(peer);
    }
    throw_call_error(ucs_status_string(st), "ucp_get_nbx", __FILE__, __LINE__);
  }
  GetId id = next_id_++;
  gets_.emplace(id, std::make_pair(req, peer));
  return id;
}

bool UcxTransport::test(GetId id) {
  auto it = gets_.find(id);
  if (it == gets_.end()) throw Error("ucx transport: unknown get id");
  void* req = it->second.first;
  int peer = it->second.second;
  if (req == nullptr) {
    gets_.erase(it);
    return true;
  }
  ucs_status_t st = ucp_request_check_status(req);
  if (st == UCS_INPROGRESS) {
    ucp_worker_progress(worker_);
    st = ucp_request_check_status(req);
    if (st == UCS_INPROGRESS) {
      check_peer(peer);
      return false;
    }
  }
  ucp_request_free(req);
  gets_.erase(it);
  if (st != UCS_OK) {
    failed_.insert(peer);
    throw PeerFailure(peer, std::string("ucx: get from rank ") + std::to_string(peer) + " failed: " + ucs_status_string(st));
  }
  return true;
}

void UcxTransport::send(int peer, const CtrlMsg& msg) {
  if (failed_.count(peer)) return;  // forgotten: nothing more goes to it
  sends_.push_back(PendingSend{encode(msg), nullptr, peer, peers_.at(size_t(peer)).generation});
  PendingSend& s = sends_.back();
  ucp_request_param_t param{};
  void* req = ucp_tag_send_nbx(peers_.at(size_t(peer)).ep, s.bytes.data(), s.bytes.size(), kCtrlTagHigh | uint32_t(rank_),
                               &param);
  if (UCS_PTR_IS_ERR(req)) {
    sends_.pop_back();
    failed_.insert(peer);
    throw PeerFailure(peer, std::string("ucx: send to rank ") + std::to_string(peer) + " failed: " +
                                ucs_status_string(UCS_PTR_STATUS(req)));
  }
  s.req = req;
}

bool UcxTransport::poll(CtrlMsg* msg) {
  ucp_worker_progress(worker_);
  ucp_tag_recv_info_t info{};
  ucp_tag_message_h m = ucp_tag_probe_nb(worker_, kCtrlTagHigh, kCtrlTagMask, 1, &info);
  if (m == nullptr) return false;
  std::vector<uint8_t> buf(info.length);
  ucp_request_param_t param{};
  void* req = ucp_tag_msg_recv_nbx(worker_, buf.data(), buf.size(), m, &param);
  ucs_status_t st = wait_request(worker_, req);
  if (st != UCS_OK) throw_call_error(ucs_status_string(st), "ucp_tag_msg_recv_nbx", __FILE__, __LINE__);
  *msg = decode(buf.data(), buf.size(), int(info.sender_tag & 0xffffffffu));
  return true;
}

void UcxTransport::progress() {
  ucp_worker_progress(worker_);
  while (!sends_.empty()) {
    PendingSend& s = sends_.front();
    if (failed_.count(s.peer) || s.generation != peers_[size_t(s.peer)].generation) {
      abandoned_.push_back(std::move(s));  // a dead peer's send may never complete
      sends_.pop_front();
      continue;
    }
    if (s.req != nullptr) {
      ucs_status_t st = ucp_request_check_status(s.req);
      if (st == UCS_INPROGRESS) break;
      ucp_request_free(s.req);
      if (st != UCS_OK) failed_.insert(s.peer);
    }
    sends_.pop_front();
  }
  // Abandoned sends keep their bytes until UCX lets go of them (an endpoint closed when a
  // replacement takes the rank over completes them).
  for (auto it = abandoned_.begin(); it != abandoned_.end();) {
    if (it->req && ucp_request_check_status(it->req) == UCS_INPROGRESS) {
      ++it;
      continue;
    }
    if (it->req) ucp_request_free(it->req);
    it = abandoned_.erase(it);
  }
}

void UcxTransport::flush_sends() {
  while (!sends_.empty()) progress();
}

std::vector<int> UcxTransport::flush_sends_unless(const std::function<bool(int)>& lost) {
  std::set<int> given_up;
  for (;;) {
    progress();
    std::set<int> stuck;
    for (const PendingSend& s : sends_) stuck.insert(s.peer);
    if (stuck.empty()) break;
    bool dropped = false;
    for (int p : stuck)
      if (lost(p)) {
        forget_peer(p);  // its sends move to abandoned_ on the next progress()
        given_up.insert(p);
        dropped = true;
      }
    if (!dropped) std::this_thread::yield();
  }
  return std::vector<int>(given_up.begin(), given_up.end());
}

void UcxTransport::shutdown() {
  flush_sends();
  MPI_CHECK(MPI_Barrier(comm_));  // no peer reads our memory past this point
  for (auto& p : peers_) {
    if (p.rkey) {
      ucp_rkey_destroy(p.rkey);
      p.rkey = nullptr;
    }
    if (p.ep) {
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
      wait_request(worker_, ucp_ep_close_nbx(p.ep, &param));
      p.ep = nullptr;
    }
  }
  MPI_CHECK(MPI_Comm_free(&comm_));
}

}  // namespace shardsync
