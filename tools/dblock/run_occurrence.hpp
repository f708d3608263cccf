#pragma once
// `run --once-per/--occurrence`: the claim of the occurrence before the command, and the record of
// how it ended after it.
#include <memory>
#include <optional>
#include <string_view>

#include <dblock/lock.hpp>
#include <dblock/occurrence.hpp>
#include <dblock/store.hpp>

#include "dblock/logging.hpp"

namespace dblock::cli::detail {

/// Claims this occurrence under `lock`. When it cannot (already claimed, or the lease ended), says
/// so on `out` and returns nothing: the command must not run.
std::optional<Occurrence> claim_occurrence(const std::shared_ptr<Store>& store, const Lock& lock,
                                           const OccurrenceOptions& options, std::string_view name, const Stderr& out);

/// Records the run's exit code. A failure to record is said, not thrown: the lock must still be
/// released.
void record_occurrence_end(Occurrence& occurrence, int exit_code, std::string_view name, const Stderr& out);

}  // namespace dblock::cli::detail
