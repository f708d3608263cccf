// The public error classes (include/dblock/errors.hpp): base-layer code throws them, so they live here.
#include <dblock/errors.hpp>

#include <algorithm>

namespace dblock {

Error::Error(ErrorCategory category, const std::string& message, std::string_view sqlstate)
    : std::runtime_error(message), category_(category) {
  std::copy_n(sqlstate.begin(), std::min(sqlstate.size(), sqlstate_.size() - 1), sqlstate_.begin());
}

}  // namespace dblock
