#include "dblock/leader_command.hpp"

#include <chrono>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <dblock/leader_election.hpp>
#include <dblock/text.hpp>

namespace dblock::cli {

int print_leader(Store& store, const std::string& name, bool json) {
  auto leader = LeaderElection::leader(store, name);
  if (json) {
    if (!leader) {
      fmt::print("{{\"name\":{},\"leader\":null}}\n", json_string(name));
    } else {
      auto since_ms = std::chrono::duration_cast<std::chrono::milliseconds>(leader->since.time_since_epoch()).count();
      fmt::print("{{\"name\":{},\"leader\":{{\"owner\":{},\"token\":{},\"since_unix_ms\":{},\"lease_left_ms\":{}}}}}\n",
                 json_string(name), json_string(leader->owner), leader->token, since_ms, leader->lease_left.count());
    }
    return leader ? 0 : 1;
  }
  if (!leader) {
    fmt::print("no leader of {}\n", terminal_safe(name));
    return 1;
  }
  auto since = std::chrono::time_point_cast<std::chrono::seconds>(leader->since);
  // The owner comes from the database: escaped like every other name shown on a terminal.
  fmt::print("leader of {}: {}\ntoken: {}\nsince: {:%Y-%m-%dT%H:%M:%SZ} ({} ago)\nlease left: {}\n",
             terminal_safe(name), terminal_safe(leader->owner), leader->token, since,
             format_duration(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now() -
                                                                                   leader->since)),
             format_duration(leader->lease_left));
  return 0;
}

}  // namespace dblock::cli
