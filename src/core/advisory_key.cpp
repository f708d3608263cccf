#include <dblock/advisory_key.hpp>

#include <fmt/format.h>

namespace dblock {

AdvisoryKey AdvisoryKey::from_name(std::string_view name) noexcept {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (char c : name) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ull;
  }
  return of(static_cast<std::int64_t>(hash));
}

std::string AdvisoryKey::to_string() const {
  return two_part_ ? fmt::format("key:{},{}", first_, second_) : fmt::format("key:{}", key_);
}

}  // namespace dblock
