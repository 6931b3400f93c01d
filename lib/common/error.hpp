// Error convention of every layer: throw shardsync::Error (or InputError for bad input);
// the top level of each app catches, prints to stderr, and exits non-zero (MPI_Abort in
// an MPI job, so that no rank is left waiting). Nothing below the top level calls exit().
#pragma once

#include <stdexcept>
#include <string>

namespace shardsync {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad input answered at the boundary: names the file (or flag), the field, and what was
// expected. Nothing deeper has to re-check what the boundary accepted.
class InputError : public Error {
 public:
  InputError(const std::string& source, const std::string& field, const std::string& expected)
      : Error(source + ": " + field + ": " + expected), source_(source), field_(field) {}
  const std::string& source() const { return source_; }
  const std::string& field() const { return field_; }

 private:
  std::string source_;
  std::string field_;
};

}  // namespace shardsync
