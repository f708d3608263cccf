#pragma once
#include <string>

#include <dblock/store.hpp>

namespace dblock::cli {

/// `dblock leader NAME`: who leads the name now. Returns the exit code: 0 with a leader, 1 without.
int print_leader(Store& store, const std::string& name, bool json);

}  // namespace dblock::cli
