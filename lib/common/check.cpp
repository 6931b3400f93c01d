#include "common/check.hpp"

#include <unistd.h>

#include <cstdlib>

namespace shardsync {

std::string where_am_i() {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  const char* rank = nullptr;
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (!rank) rank = std::getenv(var);
  return std::string(host) + ":" + (rank ? rank : "-");
}

void throw_call_error(const std::string& detail, const char* call, const char* file, int line) {
  throw Error(where_am_i() + " " + file + ":" + std::to_string(line) + " " + call + " -> " +
              detail);
}

}  // namespace shardsync
