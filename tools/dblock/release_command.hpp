#pragma once
#include <string>

#include <dblock/store.hpp>

namespace dblock::cli {

/// `dblock release --force`: revokes the lock `name` whoever holds it, or with `unsafe_delete`
/// deletes its row at once. Returns the process exit code: 1 when there was nothing to release.
int run_release(Store& store, const std::string& name, bool unsafe_delete);

/// `dblock release --ask`: asks the holder of `name` to let go (Store::request_release). Returns
/// the process exit code: 1 when no live holder could be asked.
int run_release_ask(Store& store, const std::string& name);

}  // namespace dblock::cli
