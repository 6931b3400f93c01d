// MPI implementation: one RMA window over every rank's exported region (passive target,
// lock_all once), MPI_Rget for one-sided reads, MPI_Isend/MPI_Improbe for control.
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <unordered_map>

#include "transport/mpi_transport.hpp"
#include "transport/wire.hpp"

namespace shardsync {

namespace {
constexpr int kCtrlTag = 7001;
constexpr int kReadReqTag = 7003;   // two-sided reads: {offset, bytes, reply tag}
constexpr int kReadDataBase = 8000;  // reply tags 8000..30000
}

MpiTransport::~MpiTransport() = default;  // after an error the process aborts; nothing collective here

void MpiTransport::shutdown() {
  flush_sends();
  MPI_CHECK(MPI_Barrier(comm_));  // no peer reads our memory past this point
  if (win_ != MPI_WIN_NULL) {
    MPI_CHECK(MPI_Win_unlock_all(win_));
    MPI_CHECK(MPI_Win_free(&win_));
  }
  if (comm_ != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&comm_));
}

std::string MpiTransport::describe() const {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int n = 0;
  MPI_Get_library_version(version, &n);
  std::string v(version, size_t(n));
  if (auto p = v.find('\n'); p != std::string::npos) v.resize(p);
  if (auto p = v.find(','); p != std::string::npos) v.resize(p);
  if (control_only_) return "mpi (" + v + ", control messages only)";
  if (two_sided_)
    return "mpi (" + v + ", two-sided reads served by the owner: MPI_Win_create is unavailable here: " + rma_error_ + ")";
  return "mpi (" + v + ", RMA window + MPI_Rget)";
}

void MpiTransport::bootstrap(MPI_Comm world, const Registration& reg) {
  if (reg.kind != MemKind::kHost) throw Error("mpi transport: only host memory is supported");
  MPI_CHECK(MPI_Comm_dup(world, &comm_));
  landing_ = static_cast<uint8_t*>(reg.landing_base);
  landing_bytes_ = reg.landing_bytes;
  export_ = static_cast<uint8_t*>(reg.export_base);
  export_bytes_ = reg.export_bytes;
  if (control_only_) return;
  // RMA windows where this MPI has a working one-sided component; else every rank agrees
  // to serve reads two-sided.
  MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  MPI_Info info;
  MPI_CHECK(MPI_Info_create(&info));
  MPI_CHECK(MPI_Info_set(info, "same_disp_unit", "true"));
  const char* force = getenv("SHARDSYNC_MPI_TWO_SIDED");  // tests exercise the fallback
  int rc = force && std::string(force) == "1"
               ? MPI_ERR_WIN
               : MPI_Win_create(reg.export_bytes ? reg.export_base : nullptr, MPI_Aint(reg.export_bytes), 1, info, comm_, &win_);
  MPI_CHECK(MPI_Info_free(&info));
  int ok = rc == MPI_SUCCESS, all_ok = 0;
  MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm_));
  if (!all_ok) {
    char msg[MPI_MAX_ERROR_STRING];
    int n = 0;
    MPI_Error_string(rc, msg, &n);
    rma_error_ = std::string(msg, size_t(n));
    if (rc == MPI_SUCCESS) MPI_CHECK(MPI_Win_free(&win_));
    win_ = MPI_WIN_NULL;
    two_sided_ = true;
    return;
  }
  MPI_CHECK(MPI_Win_set_errhandler(win_, MPI_ERRORS_RETURN));  // a window's default is fatal
  MPI_CHECK(MPI_Win_lock_all(MPI_MODE_NOCHECK, win_));
}

namespace {

// A read's MPI call failed (its window and communicator return errors): the error names the rank
// read from, as a dead peer's reads fail (Open MPI's shared-memory reads from a process that is
// gone), so that the run ends naming the rank it lost rather than in MPI's own abort.
void read_check(int rc, int peer) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(rc, msg, &n);
  throw Error("mpi transport: a read from rank " + std::to_string(peer) + " failed: " + std::string(msg, size_t(n)));
}

}  // namespace

Transport::GetId MpiTransport::get(int peer, size_t remote_offset, size_t local_offset, size_t bytes) {
  if (bytes > size_t(INT_MAX)) throw Error("mpi transport: a get of more than 2 GiB");
  if (local_offset + bytes > landing_bytes_) throw Error("mpi transport: get outside the landing region");
  if (control_only_) throw Error("mpi transport: control-only instance cannot read");
  MPI_Request req;
  GetId id = next_id_++;
  if (two_sided_) {
    int tag = kReadDataBase + int(id % 22000);
    MPI_CHECK(MPI_Irecv(landing_ + local_offset, int(bytes), MPI_BYTE, peer, tag, comm_, &req));
    sends_.push_back(Pending{std::vector<uint8_t>(3 * sizeof(int64_t)), MPI_REQUEST_NULL, peer});
    int64_t hdr[3] = {int64_t(remote_offset), int64_t(bytes), tag};
    std::memcpy(sends_.back().bytes.data(), hdr, sizeof hdr);
    MPI_CHECK(MPI_Isend(sends_.back().bytes.data(), int(sizeof hdr), MPI_BYTE, peer, kReadReqTag, comm_, &sends_.back().req));
    gets_.emplace(id, Get{req, peer});
    return id;
  }
  read_check(MPI_Rget(landing_ + local_offset, int(bytes), MPI_BYTE, peer, MPI_Aint(remote_offset), int(bytes), MPI_BYTE,
                      win_, &req),
             peer);
  gets_.emplace(id, Get{req, peer});
  return id;
}

bool MpiTransport::test(GetId id) {
  if (two_sided_) serve_reads();
  auto it = gets_.find(id);
  if (it == gets_.end()) throw Error("mpi transport: unknown get id");
  int done = 0;
  read_check(MPI_Test(&it->second.req, &done, MPI_STATUS_IGNORE), it->second.peer);
  if (done) gets_.erase(it);
  return done != 0;
}

void MpiTransport::forget_peer(int peer) {
  forgotten_.push_back(peer);
  for (auto it = sends_.begin(); it != sends_.end();) {
    if (it->peer == peer) {
      MPI_Cancel(&it->req);
      MPI_Request_free(&it->req);
      it = sends_.erase(it);
    } else {
      ++it;
    }
  }
}

void MpiTransport::send(int peer, const CtrlMsg& msg) {
  if (std::find(forgotten_.begin(), forgotten_.end(), peer) != forgotten_.end()) return;
  sends_.push_back(Pending{encode(msg), MPI_REQUEST_NULL, peer});
  Pending& p = sends_.back();
  MPI_CHECK(MPI_Isend(p.bytes.data(), int(p.bytes.size()), MPI_BYTE, peer, kCtrlTag, comm_, &p.req));
}

bool MpiTransport::poll(CtrlMsg* msg) {
  if (two_sided_) serve_reads();
  int flag = 0;
  MPI_Message m;
  MPI_Status st;
  MPI_CHECK(MPI_Improbe(MPI_ANY_SOURCE, kCtrlTag, comm_, &flag, &m, &st));
  if (!flag) return false;
  int n = 0;
  MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &n));
  std::vector<uint8_t> buf(static_cast<size_t>(n));
  MPI_CHECK(MPI_Mrecv(buf.data(), n, MPI_BYTE, &m, MPI_STATUS_IGNORE));
  *msg = decode(buf.data(), buf.size(), st.MPI_SOURCE);
  return true;
}

void MpiTransport::serve_reads() {
  for (;;) {
    int flag = 0;
    MPI_Status st;
    MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, kReadReqTag, comm_, &flag, &st));
    if (!flag) break;
    int64_t hdr[3];
    MPI_CHECK(MPI_Recv(hdr, int(sizeof hdr), MPI_BYTE, st.MPI_SOURCE, kReadReqTag, comm_, MPI_STATUS_IGNORE));
    if (hdr[0] < 0 || hdr[1] < 0 || size_t(hdr[0] + hdr[1]) > export_bytes_)
      throw Error("mpi transport: rank " + std::to_string(st.MPI_SOURCE) + " asked to read outside the export region");
    MPI_Request req;
    MPI_CHECK(MPI_Isend(export_ + hdr[0], int(hdr[1]), MPI_BYTE, st.MPI_SOURCE, int(hdr[2]), comm_, &req));
    serving_.push_back(req);
  }
  while (!serving_.empty()) {
    int done = 0;
    MPI_CHECK(MPI_Test(&serving_.front(), &done, MPI_STATUS_IGNORE));
    if (!done) break;
    serving_.pop_front();
  }
}

void MpiTransport::progress() {
  if (two_sided_) serve_reads();
  while (!sends_.empty()) {
    int done = 0;
    MPI_CHECK(MPI_Test(&sends_.front().req, &done, MPI_STATUS_IGNORE));
    if (!done) break;
    sends_.pop_front();
  }
}

void MpiTransport::flush_sends() {
  for (auto& s : sends_) MPI_CHECK(MPI_Wait(&s.req, MPI_STATUS_IGNORE));
  sends_.clear();
  for (auto& r : serving_) MPI_CHECK(MPI_Wait(&r, MPI_STATUS_IGNORE));
  serving_.clear();
}

}  // namespace shardsync
