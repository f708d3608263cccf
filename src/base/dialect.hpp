#pragma once
// The SQL dialects dblock speaks, set once from the URI's scheme; everything else compares the
// enum, never the scheme's text.

#include <string_view>

namespace dblock::detail {

enum class Dialect { postgresql, mysql, sqlite };

/// "postgresql", "mysql", "sqlite": the scheme as dblock normalises it (Store::dialect()).
[[nodiscard]] constexpr std::string_view to_string(Dialect dialect) noexcept {
  switch (dialect) {
    case Dialect::postgresql:
      return "postgresql";
    case Dialect::mysql:
      return "mysql";
    case Dialect::sqlite:
      return "sqlite";
  }
  return "?";
}

}  // namespace dblock::detail
