// The CLI's embedded default store: which file it is for this user, created safely when missing, and
// refused when another user could write it or when a previous release's store is in the way.
#pragma once

#include <stdexcept>
#include <string>

namespace dblock::cli {

/// A refusal to use the default store; the message names the path, what is wrong and the fix.
class StoreRefused : public std::runtime_error {
 public:
  StoreRefused(int exit_code, const std::string& message) : std::runtime_error(message), exit_code_(exit_code) {}
  [[nodiscard]] int exit_code() const noexcept { return exit_code_; }

 private:
  int exit_code_;
};

/// The default store's URI without touching the file system: for the subcommands that need no
/// connection (`migrate sql`, `migrate grants`).
std::string default_store_uri();

/// The default store's URI, its directory and file created when missing (directory 0755 for root,
/// 0700 for other users; file 0600, 0660 in a directory shared with the `dblock` group), after
/// checking that no user but the caller, root and members of the `dblock` group can write the
/// file, its SQLite siblings, its directory or the directory's ancestors. Throws StoreRefused
/// (exit 77) otherwise, and (exit 78) when the working directory holds a dblock store of the
/// previous release, which kept its store in ./dblock.db.
std::string open_default_store();

}  // namespace dblock::cli
