// shardsync info: what this build has and what this machine shows (one "key value" line
// each, for scripts): CUDA, NCCL, UCX, transports, visible GPUs, library versions.
#include <hdf5.h>
#include <mpi.h>

#include <iostream>

#include "commands.hpp"
#include "engine/collectives.hpp"
#include "device/device.hpp"
#include "report/result.hpp"
#include "transport/transport.hpp"

namespace shardsync {

void setup_info_command(CLI::App& app) {
  auto* info = app.add_subcommand("info", "Print build features (CUDA, NCCL, UCX), transports and visible GPUs");
  info->callback([] {
    std::string transports;
    for (const auto& t : transport_registry()) transports += (transports.empty() ? "" : ",") + t.name;
    int gpus = cuda_device_count();
    std::cout << "version 0.1.0\n"
              << "commit " << build_commit() << "\n"
              << "cuda " << (cuda_built() ? "yes" : "no") << "\n"
              << "nccl " << (nccl_built() ? "yes" : "no") << "\n"
              << "transports " << transports << "\n"
              << "gpus " << gpus << "\n";
    if (cuda_built() && gpus == 0) {
      std::cout << "cuda_error " << cuda_error() << "\n";
      // A GPU the driver lists but CUDA cannot use: a broken setup, not a machine without GPUs.
      std::cout << "driver_gpus " << gpus_listed_by_driver() << "\n";
    }
    for (int g = 0; g < gpus; ++g) std::cout << "gpu" << g << " " << make_cuda_device(g)->describe() << "\n";
    for (const auto& [name, version] : library_versions()) std::cout << name << " " << version << "\n";
  });
}

}  // namespace shardsync
