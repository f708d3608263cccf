#include "base/duration.hpp"

#include <charconv>
#include <cstdint>
#include <limits>

#include <fmt/format.h>
#include <dblock/errors.hpp>

namespace dblock::detail {

std::chrono::milliseconds parse_duration(std::string_view text) {
  auto fail = [&](std::string_view why) -> std::chrono::milliseconds {
    throw InvalidArgument(fmt::format("duration '{}' is invalid: {} (examples: 500ms, 30s, 5m, 1h)", text, why));
  };
  if (text == "0") return std::chrono::milliseconds(0);
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range) return fail("number too large");
  if (ec != std::errc() || end == text.data()) return fail("it must start with a whole number");
  std::string_view unit(end, static_cast<std::size_t>(text.data() + text.size() - end));
  std::uint64_t scale = 0;
  if (unit == "ms")
    scale = 1;
  else if (unit == "s")
    scale = 1000;
  else if (unit == "m")
    scale = 60'000;
  else if (unit == "h")
    scale = 3'600'000;
  else
    return fail(unit.empty() ? "a unit is missing" : "unknown unit");
  constexpr auto kLimit = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max() / 1000);
  if (value > kLimit / scale) return fail("number too large");
  return std::chrono::milliseconds(static_cast<std::int64_t>(value * scale));
}

std::string format_duration(std::chrono::milliseconds duration) {
  auto ms = duration.count();
  if (ms % 60'000 == 0 && ms != 0) return fmt::format("{}m", ms / 60'000);
  if (ms % 1000 == 0 && ms != 0) return fmt::format("{}s", ms / 1000);
  if (ms >= 1000 || ms <= -1000) return fmt::format("{:.1f}s", static_cast<double>(ms) / 1000.0);
  return fmt::format("{}ms", ms);
}

}  // namespace dblock::detail
