#pragma once
/// The text rules dblock applies, for applications and tools that read or print what dblock
/// reads or prints: durations as the CLI writes them, lock-name and TTL checks, and safe output of
/// names and owners, which come from the database and may hold anything. Pure functions,
/// thread-safe; the checks throw dblock::InvalidArgument naming the input and the rule.

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include <dblock/options.hpp>

#include <dblock/export.hpp>

namespace dblock {

/// "500ms", "30s", "5m", "2h" or "0" (any other number needs a unit). @throws InvalidArgument.
[[nodiscard]] DBLOCK_EXPORT std::chrono::milliseconds parse_duration(std::string_view text);
/// `duration` for people: "250ms", "1.5s", "2m".
[[nodiscard]] DBLOCK_EXPORT std::string format_duration(std::chrono::milliseconds duration);
/// A lock name: 1..255 bytes of valid UTF-8 without NUL. @throws InvalidArgument.
DBLOCK_EXPORT void validate_lock_name(std::string_view name);
/// A lease length: 3 ms .. 30 days. @throws InvalidArgument.
DBLOCK_EXPORT void validate_ttl(std::chrono::milliseconds ttl);
/// `text` on one line with no escape sequence, control or bidirectional character left raw
/// (written as `\xNN` / `\u{NNNN}`; a backslash as `\\`): for names and owners on a terminal or
/// in a line-based log.
[[nodiscard]] DBLOCK_EXPORT std::string terminal_safe(std::string_view text);
/// "exclusive", "permit" or "shared", as `dblock locks` prints a holder's kind.
[[nodiscard]] DBLOCK_EXPORT std::string_view holder_kind_name(HolderKind kind) noexcept;
/// `text` as a JSON string literal, quotes included.
[[nodiscard]] DBLOCK_EXPORT std::string json_string(std::string_view text);
/// The backends this build of the library holds, each with its driver's version, e.g.
/// "postgresql (libpq 15.18)".
[[nodiscard]] DBLOCK_EXPORT std::vector<std::string> compiled_backends();

}  // namespace dblock
