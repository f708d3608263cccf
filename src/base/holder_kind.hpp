#pragma once
// How a HolderKind is spelled: in the holders table, in listings and in JSON.

#include <string_view>

#include <dblock/options.hpp>

namespace dblock::detail {

[[nodiscard]] constexpr std::string_view kind_text(HolderKind kind) noexcept {
  switch (kind) {
    case HolderKind::permit:
      return "permit";
    case HolderKind::shared:
      return "shared";
    case HolderKind::exclusive:
      break;
  }
  return "exclusive";
}

[[nodiscard]] constexpr HolderKind kind_from_text(std::string_view text) noexcept {
  if (text == "permit") return HolderKind::permit;
  if (text == "shared") return HolderKind::shared;
  return HolderKind::exclusive;
}

}  // namespace dblock::detail
