#pragma once
// Input checks shared by the library and the CLI. Each throws dblock::InvalidArgument naming the
// input and the rule, before anything is sent to a database.

#include <chrono>
#include <string_view>

namespace dblock::detail {

inline constexpr std::size_t kMaxNameBytes = 255;
inline constexpr std::chrono::milliseconds kMinTtl{3};
inline constexpr std::chrono::milliseconds kMaxTtl = std::chrono::hours(24 * 30);

/// 1..255 bytes of valid UTF-8 without NUL.
void validate_lock_name(std::string_view name);
/// ManagerOptions::owner_tag: up to 64 bytes of valid UTF-8 without control characters (a NUL
/// would cut the owner id short on PostgreSQL and merge owners; a newline would forge lines).
void validate_owner_tag(std::string_view tag);
/// An owner id named by a caller (Lock::hand_over's successor): 1..255 bytes of valid UTF-8
/// without control characters, as the library makes them. `what` names it in the error.
void validate_owner_id(std::string_view owner, std::string_view what);
/// LockOptions::note: up to 255 bytes of valid UTF-8 without NUL.
void validate_note(std::string_view note);
/// kMinTtl..kMaxTtl and at least three renew intervals.
void validate_ttl(std::chrono::milliseconds ttl, std::chrono::milliseconds renew_interval);
/// Schema names and table prefixes: [a-z_][a-z0-9_]*, so they need no quoting in any dialect.
void validate_identifier(std::string_view what, std::string_view value, std::size_t max_length, bool allow_empty);
[[nodiscard]] bool is_valid_utf8(std::string_view text) noexcept;

}  // namespace dblock::detail
