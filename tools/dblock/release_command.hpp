#pragma once
#include <string>

#include <dblock/store.hpp>

namespace dblock::cli {

/// `dblock release --force`: revokes the lock `name` whoever holds it, or with `unsafe_delete`
/// deletes its row at once. Returns the process exit code: 1 when there was nothing to release.
int run_release(Store& store, const std::string& name, bool unsafe_delete);

}  // namespace dblock::cli
