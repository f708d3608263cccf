#include "base/validate.hpp"

#include <fmt/format.h>
#include <dblock/errors.hpp>

namespace dblock::detail {

namespace {

std::string printable(std::string_view text) {
  constexpr std::size_t kShown = 40;
  std::string out;
  for (char c : text.substr(0, kShown)) {
    auto byte = static_cast<unsigned char>(c);
    out += (byte < 0x20 || byte == 0x7f) ? fmt::format("\\x{:02x}", byte) : std::string(1, c);
  }
  return text.size() > kShown ? out + "..." : out;
}

}  // namespace

bool is_valid_utf8(std::string_view text) noexcept {
  std::size_t i = 0;
  while (i < text.size()) {
    auto lead = static_cast<unsigned char>(text[i]);
    std::size_t extra = 0;
    std::uint32_t code = 0;
    if (lead < 0x80) {
      ++i;
      continue;
    }
    if ((lead & 0xE0) == 0xC0) {
      extra = 1;
      code = lead & 0x1F;
    } else if ((lead & 0xF0) == 0xE0) {
      extra = 2;
      code = lead & 0x0F;
    } else if ((lead & 0xF8) == 0xF0) {
      extra = 3;
      code = lead & 0x07;
    } else
      return false;
    if (i + extra >= text.size()) return false;
    for (std::size_t k = 1; k <= extra; ++k) {
      auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0) != 0x80) return false;
      code = (code << 6) | (next & 0x3F);
    }
    static constexpr std::uint32_t kMinForLength[] = {0, 0x80, 0x800, 0x10000};
    if (code < kMinForLength[extra] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return false;
    i += extra + 1;
  }
  return true;
}

void validate_lock_name(std::string_view name) {
  if (name.empty()) throw InvalidArgument("lock name is empty");
  if (name.size() > kMaxNameBytes)
    throw InvalidArgument(fmt::format("lock name '{}' is {} bytes long; at most {} are allowed", printable(name),
                                      name.size(), kMaxNameBytes));
  if (name.find('\0') != std::string_view::npos)
    throw InvalidArgument(fmt::format("lock name '{}' contains a NUL byte", printable(name)));
  if (!is_valid_utf8(name)) throw InvalidArgument(fmt::format("lock name '{}' is not valid UTF-8", printable(name)));
}

void validate_owner_tag(std::string_view tag) {
  constexpr std::size_t kMaxTagBytes = 64;
  if (tag.size() > kMaxTagBytes)
    throw InvalidArgument(
        fmt::format("ManagerOptions.owner_tag is {} bytes; at most {} are allowed", tag.size(), kMaxTagBytes));
  for (unsigned char c : tag)
    if (c < 0x20 || c == 0x7f)
      throw InvalidArgument(fmt::format("ManagerOptions.owner_tag '{}' contains a control character", printable(tag)));
  if (!is_valid_utf8(tag))
    throw InvalidArgument(fmt::format("ManagerOptions.owner_tag '{}' is not valid UTF-8", printable(tag)));
}

void validate_owner_id(std::string_view owner, std::string_view what) {
  if (owner.empty() || owner.size() > kMaxNameBytes)
    throw InvalidArgument(
        fmt::format("{} is {} bytes; it must be between 1 and {}", what, owner.size(), kMaxNameBytes));
  for (unsigned char c : owner)
    if (c < 0x20 || c == 0x7f)
      throw InvalidArgument(fmt::format("{} '{}' contains a control character", what, printable(owner)));
  if (!is_valid_utf8(owner)) throw InvalidArgument(fmt::format("{} '{}' is not valid UTF-8", what, printable(owner)));
}

void validate_note(std::string_view note) {
  if (note.size() > kMaxNameBytes)
    throw InvalidArgument(
        fmt::format("LockOptions.note is {} bytes; at most {} are allowed", note.size(), kMaxNameBytes));
  if (note.find('\0') != std::string_view::npos) throw InvalidArgument("LockOptions.note contains a NUL byte");
  if (!is_valid_utf8(note))
    throw InvalidArgument(fmt::format("LockOptions.note '{}' is not valid UTF-8", printable(note)));
}

void validate_ttl(std::chrono::milliseconds ttl, std::chrono::milliseconds renew_interval) {
  if (ttl < kMinTtl || ttl > kMaxTtl)
    throw InvalidArgument(fmt::format("ttl {}ms is out of range: it must be between {}ms and {}ms", ttl.count(),
                                      kMinTtl.count(), kMaxTtl.count()));
  if (renew_interval.count() > 0 && ttl < 3 * renew_interval)
    throw InvalidArgument(
        fmt::format("ttl {}ms is shorter than three renew intervals ({}ms each)", ttl.count(), renew_interval.count()));
}

void validate_identifier(std::string_view what, std::string_view value, std::size_t max_length, bool allow_empty) {
  auto fail = [&](std::string_view rule) {
    throw InvalidArgument(fmt::format("{} '{}' is invalid: {}", what, printable(value), rule));
  };
  if (value.empty()) {
    if (!allow_empty) fail("it must not be empty");
    return;
  }
  if (value.size() > max_length) fail(fmt::format("at most {} characters", max_length));
  for (std::size_t i = 0; i < value.size(); ++i) {
    char c = value[i];
    bool ok = (c >= 'a' && c <= 'z') || c == '_' || (i > 0 && c >= '0' && c <= '9');
    if (!ok) fail("use lower-case letters, digits and '_', not starting with a digit");
  }
}

}  // namespace dblock::detail
