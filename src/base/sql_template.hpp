#pragma once
// SQL templating: `{name}` placeholders filled in one pass. What fills them (schema names, table
// prefixes) is validated before, so substitution cannot inject SQL.
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace dblock::detail {

/// Replaces each `{name}` placeholder by its value in one pass (values are not re-scanned).
inline std::string fill(std::string_view text,
                        std::initializer_list<std::pair<std::string_view, std::string_view>> values) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    bool replaced = false;
    for (auto& [key, value] : values) {
      if (text.substr(i, key.size()) == key) {
        out += value;
        i += key.size();
        replaced = true;
        break;
      }
    }
    if (!replaced) out += text[i++];
  }
  return out;
}

/// Fills {schema} and {prefix} in a migration. Both were validated as [a-z_][a-z0-9_]* by the
/// Store, so plain substitution cannot inject SQL.
inline std::string fill_placeholders(std::string_view sql, std::string_view schema, std::string_view prefix) {
  return fill(sql, {{"{schema}", schema}, {"{prefix}", prefix}});
}

}  // namespace dblock::detail
