#pragma once
#include <chrono>
#include <string>
#include <string_view>

namespace dblock::detail {

/// Parses "500ms", "30s", "5m", "2h" or "0". A number needs a unit unless it is 0.
/// @throws InvalidArgument naming the text.
[[nodiscard]] std::chrono::milliseconds parse_duration(std::string_view text);
/// "1.5s", "250ms", "2m" ...
[[nodiscard]] std::string format_duration(std::chrono::milliseconds duration);

}  // namespace dblock::detail
