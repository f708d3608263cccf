#include "base/terminal_text.hpp"

#include <cstdint>

#include <fmt/format.h>

namespace dblock::detail {

namespace {

/// The length of the valid UTF-8 sequence at `text[i]` and its code point; 0 when invalid.
std::size_t decode(std::string_view text, std::size_t i, std::uint32_t& code) {
  auto lead = static_cast<unsigned char>(text[i]);
  std::size_t length = lead < 0x80             ? 1
                       : (lead & 0xE0) == 0xC0 ? 2
                       : (lead & 0xF0) == 0xE0 ? 3
                       : (lead & 0xF8) == 0xF0 ? 4
                                               : 0;
  if (length == 0 || i + length > text.size()) return 0;
  code = length == 1 ? lead : length == 2 ? lead & 0x1F : length == 3 ? lead & 0x0F : lead & 0x07;
  for (std::size_t k = 1; k < length; ++k) {
    auto next = static_cast<unsigned char>(text[i + k]);
    if ((next & 0xC0) != 0x80) return 0;
    code = (code << 6) | (next & 0x3F);
  }
  static constexpr std::uint32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
  if (code < kSmallest[length] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return 0;
  return length;
}

bool is_bidi_control(std::uint32_t code) {
  return code == 0x200E || code == 0x200F || (code >= 0x202A && code <= 0x202E) || (code >= 0x2066 && code <= 0x2069);
}

}  // namespace

std::string terminal_safe(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    std::uint32_t code = 0;
    auto length = decode(text, i, code);
    if (length == 0) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(text[i]));
      ++i;
      continue;
    }
    if (code == '\\')
      out += "\\\\";
    else if (code < 0x20 || code == 0x7F)
      out += fmt::format("\\x{:02x}", code);
    else if ((code >= 0x80 && code <= 0x9F) || is_bidi_control(code))
      out += fmt::format("\\u{{{:04x}}}", code);
    else
      out.append(text.substr(i, length));
    i += length;
  }
  return out;
}

}  // namespace dblock::detail
