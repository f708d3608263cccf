#pragma once
#include <dblock/store.hpp>

namespace dblock::cli {

/// `dblock locks`: every lock and once-per-occurrence record of `store`, one row each (names and
/// owners escaped), or one JSON array.
void print_locks(Store& store, bool json);

}  // namespace dblock::cli
