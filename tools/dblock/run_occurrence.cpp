#include "dblock/run_occurrence.hpp"

#include <string>

#include <fmt/format.h>
#include <dblock/errors.hpp>

namespace dblock::cli::detail {

std::optional<Occurrence> claim_occurrence(const std::shared_ptr<Store>& store, const Lock& lock,
                                           const OccurrenceOptions& options, std::string_view name, const Stderr& out) {
  auto occurrence = Occurrence::claim(store, lock, options);
  if (occurrence.claimed()) return occurrence;
  auto& seen = occurrence.existing();
  out.say("info", fmt::format("occurrence {} of '{}' {}; not running it again", occurrence.key(), name,
                              seen ? fmt::format("was already claimed ({}, token {})",
                                                 occurrence_status_name(seen->status), seen->token)
                                   : std::string("could not be claimed (the lock's lease ended)")));
  return std::nullopt;
}

void record_occurrence_end(Occurrence& occurrence, int exit_code, std::string_view name, const Stderr& out) {
  try {
    occurrence.finish(exit_code);
  } catch (const Error& e) {
    out.say("error",
            fmt::format("could not record how occurrence {} of '{}' ended: {}", occurrence.key(), name, e.what()));
  }
}

}  // namespace dblock::cli::detail
