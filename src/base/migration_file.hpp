#pragma once
#include <string_view>

namespace dblock::detail {

/// One embedded migration, placeholders not yet filled.
struct MigrationFile {
  int version = 0;
  std::string_view name;
  std::string_view checksum;  // SHA-256 of the file as shipped, hex
  std::string_view sql;
};

}  // namespace dblock::detail
