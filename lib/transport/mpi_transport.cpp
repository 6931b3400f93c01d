// MPI implementation: one RMA window over every rank's exported region (passive target,
// lock_all once), MPI_Rget for one-sided reads, MPI_Isend/MPI_Improbe for control.
#include <climits>
#include <deque>
#include <unordered_map>

#include "transport/mpi_transport.hpp"
#include "transport/wire.hpp"

namespace shardsync {

namespace {
constexpr int kCtrlTag = 7001;
}

MpiTransport::~MpiTransport() = default;  // after an error the process aborts; nothing collective here

void MpiTransport::shutdown() {
  flush_sends();
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
  return "mpi (" + v + ", RMA window + MPI_Rget)";
}

void MpiTransport::bootstrap(MPI_Comm world, const Registration& reg) {
  if (reg.kind != MemKind::kHost) throw Error("mpi transport: only host memory is supported");
  MPI_CHECK(MPI_Comm_dup(world, &comm_));
  landing_ = static_cast<uint8_t*>(reg.landing_base);
  landing_bytes_ = reg.landing_bytes;
  MPI_Info info;
  MPI_CHECK(MPI_Info_create(&info));
  MPI_CHECK(MPI_Info_set(info, "same_disp_unit", "true"));
  MPI_CHECK(MPI_Win_create(reg.export_bytes ? reg.export_base : nullptr, MPI_Aint(reg.export_bytes), 1, info, comm_, &win_));
  MPI_CHECK(MPI_Info_free(&info));
  MPI_CHECK(MPI_Win_lock_all(MPI_MODE_NOCHECK, win_));
}

Transport::GetId MpiTransport::get(int peer, size_t remote_offset, size_t local_offset, size_t bytes) {
  if (bytes > size_t(INT_MAX)) throw Error("mpi transport: a get of more than 2 GiB");
  if (local_offset + bytes > landing_bytes_) throw Error("mpi transport: get outside the landing region");
  MPI_Request req;
  MPI_CHECK(MPI_Rget(landing_ + local_offset, int(bytes), MPI_BYTE, peer, MPI_Aint(remote_offset), int(bytes), MPI_BYTE,
                     win_, &req));
  GetId id = next_id_++;
  gets_.emplace(id, req);
  return id;
}

bool MpiTransport::test(GetId id) {
  auto it = gets_.find(id);
  if (it == gets_.end()) throw Error("mpi transport: unknown get id");
  int done = 0;
  MPI_CHECK(MPI_Test(&it->second, &done, MPI_STATUS_IGNORE));
  if (done) gets_.erase(it);
  return done != 0;
}

void MpiTransport::send(int peer, const CtrlMsg& msg) {
  sends_.push_back(Pending{encode(msg), MPI_REQUEST_NULL});
  Pending& p = sends_.back();
  MPI_CHECK(MPI_Isend(p.bytes.data(), int(p.bytes.size()), MPI_BYTE, peer, kCtrlTag, comm_, &p.req));
}

bool MpiTransport::poll(CtrlMsg* msg) {
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

void MpiTransport::progress() {
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
}

}  // namespace shardsync
