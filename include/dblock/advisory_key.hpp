#pragma once
/// The key of a PostgreSQL advisory lock (LockMode::advisory). PostgreSQL has two key spaces:
/// one bigint, or two integers; `pg_advisory_lock(42)` and `pg_advisory_lock(0, 42)` are
/// different locks. A named lock uses the bigint space with a documented hash, so any language
/// can compute the same key (doc/advisory.md).

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

#include <dblock/export.hpp>

namespace dblock {

class DBLOCK_EXPORT AdvisoryKey {
 public:
  /// FNV-1a, 64 bits, over the name's bytes (offset basis 0xcbf29ce484222325, prime
  /// 0x100000001b3), read as a two's-complement int64. Stable: changing it is a breaking change.
  [[nodiscard]] static AdvisoryKey from_name(std::string_view name) noexcept;
  /// The key of `pg_advisory_lock(bigint)`.
  [[nodiscard]] static constexpr AdvisoryKey of(std::int64_t key) noexcept { return AdvisoryKey(key, 0, 0, false); }
  /// The key of `pg_advisory_lock(integer, integer)`.
  [[nodiscard]] static constexpr AdvisoryKey of(std::int32_t first, std::int32_t second) noexcept {
    return AdvisoryKey(0, first, second, true);
  }

  [[nodiscard]] constexpr bool two_part() const noexcept { return two_part_; }
  /// The bigint key (0 when two_part()).
  [[nodiscard]] constexpr std::int64_t key() const noexcept { return key_; }
  [[nodiscard]] constexpr std::int32_t first() const noexcept { return first_; }
  [[nodiscard]] constexpr std::int32_t second() const noexcept { return second_; }
  /// "key:42" or "key:7,42": the name a Lock on an explicit key reports.
  [[nodiscard]] std::string to_string() const;

  friend constexpr auto operator<=>(const AdvisoryKey&, const AdvisoryKey&) noexcept = default;

 private:
  constexpr AdvisoryKey(std::int64_t key, std::int32_t first, std::int32_t second, bool two_part) noexcept
      : key_(key), first_(first), second_(second), two_part_(two_part) {}
  std::int64_t key_;
  std::int32_t first_;
  std::int32_t second_;
  bool two_part_;
};

}  // namespace dblock
