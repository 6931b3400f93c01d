#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "common/error.hpp"
#include "transport/mpi_transport.hpp"
#ifdef SHARDSYNC_HAVE_UCX
#include "transport/ucx_transport.hpp"
#endif

namespace shardsync {

#ifdef SHARDSYNC_HAVE_CUDA
std::unique_ptr<Transport> make_cuda_ipc_transport();  // cuda_ipc_transport.cpp
#endif

const std::vector<TransportInfo>& transport_registry() {
  static const std::vector<TransportInfo> registry = {
#ifdef SHARDSYNC_HAVE_UCX
      {"ucx", "UCX ucp_get_nbx one-sided reads, tagged control messages",
       [] { return std::unique_ptr<Transport>(new UcxTransport()); }, {MemKind::kHost, MemKind::kCuda}, false, false},
#endif
      {"mpi", "MPI RMA (MPI_Rget on a window) and point-to-point control messages",
       [] { return std::unique_ptr<Transport>(new MpiTransport()); }, {MemKind::kHost}, false, false},
#ifdef SHARDSYNC_HAVE_CUDA
      {"cuda_ipc", "CUDA IPC between GPUs of one node (cudaMemcpyAsync from peers' send buffers), MPI control",
       [] { return make_cuda_ipc_transport(); }, {MemKind::kCuda}, true, true},
#endif
  };
  return registry;
}


std::string ucx_version() {
#ifdef SHARDSYNC_HAVE_UCX
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
#else
  return "";
#endif
}

std::string choose_transport(MemKind memory, bool one_node) {
  auto moves = [&](const TransportInfo& t) {
    return std::find(t.memory.begin(), t.memory.end(), memory) != t.memory.end();
  };
  const TransportInfo *local = nullptr, *remote = nullptr;
  for (const TransportInfo& t : transport_registry())
    if (moves(t) && t.maps_peer_memory && !local) local = &t;
  for (const TransportInfo& t : transport_registry()) {
    if (!moves(t)) continue;
    if (!local) local = &t;
    if (!t.same_node_only && !remote) remote = &t;
  }
  const char* kind = memory == MemKind::kCuda ? "GPU" : "host";
  if (!local) throw InputError("--transport", "auto", std::string("no transport of this build moves ") + kind + " memory");
  if (one_node || remote == local) return local->name;
  if (!remote)
    throw InputError("--transport", "auto", std::string("no transport of this build moves ") + kind +
                                                 " memory between nodes");
  return local->name + "+" + remote->name;
}

std::unique_ptr<Transport> make_hybrid_transport(std::unique_ptr<Transport> local, std::unique_ptr<Transport> remote);

std::unique_ptr<Transport> make_transport(const std::string& name) {
  if (auto plus = name.find('+'); plus != std::string::npos) {
    std::string a = name.substr(0, plus), b = name.substr(plus + 1);
    if (a.empty() || b.empty() || b.find('+') != std::string::npos)
      throw InputError("--transport", name, "a hybrid is LOCAL+REMOTE, e.g. cuda_ipc+ucx");
    return make_hybrid_transport(make_transport(a), make_transport(b));
  }
  std::string names;
  for (const auto& t : transport_registry()) {
    if (t.name == name) return t.make();
    names += (names.empty() ? "" : ", ") + t.name;
  }
  throw InputError("--transport", name, "not available in this build (available: " + names + ")");
}

}  // namespace shardsync
