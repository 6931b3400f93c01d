#include <unistd.h>

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
       [] { return std::unique_ptr<Transport>(new UcxTransport()); }},
#endif
      {"mpi", "MPI RMA (MPI_Rget on a window) and point-to-point control messages",
       [] { return std::unique_ptr<Transport>(new MpiTransport()); }},
#ifdef SHARDSYNC_HAVE_CUDA
      {"cuda_ipc", "CUDA IPC between GPUs of one node (cudaMemcpyAsync from peers' send buffers), MPI control",
       [] { return make_cuda_ipc_transport(); }},
#endif
  };
  return registry;
}

std::string default_transport_name() { return transport_registry().front().name; }

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
