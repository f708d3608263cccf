#include "dblock/release_command.hpp"

#include <fmt/format.h>
#include <dblock/dblock.hpp>

namespace dblock::cli {

int run_release(Store& store, const std::string& name, bool unsafe_delete) {
  auto shown = terminal_safe(name);
  if (unsafe_delete) {
    bool existed = store.force_release(name);
    fmt::print("{}\n", existed
                           ? fmt::format("deleted '{}' (unsafe: a live holder runs on until its next renewal)", shown)
                           : fmt::format("no lock named '{}'", shown));
    return existed ? 0 : 1;
  }
  auto revoked = store.revoke(name);
  if (!revoked) {
    fmt::print("no live lock named '{}' to revoke (none, expired, already revoked or in its minimum hold)\n", shown);
    return 1;
  }
  fmt::print("revoked '{}' from {} (token {}): free once its holder lets go, at the latest in {}\n", shown,
             terminal_safe(revoked->owner), revoked->token, format_duration(revoked->remaining));
  return 0;
}

int run_release_ask(Store& store, const std::string& name) {
  auto shown = terminal_safe(name);
  auto asked = store.request_release(name);
  if (!asked) {
    fmt::print(
        "no live lock named '{}' whose holder can be asked (none, expired, a group's, revoked or in its "
        "minimum hold; advisory and GET_LOCK holders are not in the lock table)\n",
        shown);
    return 1;
  }
  if (asked->owner.empty()) {
    fmt::print("asked the holder of '{}' to let go: it has released it already\n", shown);
    return 0;
  }
  fmt::print(
      "asked {} (token {}) to let go of '{}': it hears at its next renewal and keeps the lock until it "
      "releases it (lease left {})\n",
      terminal_safe(asked->owner), asked->token, shown, format_duration(asked->remaining));
  return 0;
}

}  // namespace dblock::cli
