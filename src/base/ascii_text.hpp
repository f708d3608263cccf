#pragma once
// Case and whitespace helpers for SQL text and catalog rows (identifiers, keywords, grants), one
// byte at a time through <cctype>: meant for the ASCII keywords and names the library writes and
// reads back; the library never calls setlocale, so these follow the "C" locale unless the
// application changes it.

#include <cctype>
#include <string>
#include <string_view>

namespace dblock::detail {

inline std::string_view trim_whitespace(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())) != 0) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())) != 0) text.remove_suffix(1);
  return text;
}

inline std::string ascii_upper(std::string_view text) {
  std::string out(text);
  for (auto& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

inline std::string ascii_lower(std::string_view text) {
  std::string out(text);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace dblock::detail
