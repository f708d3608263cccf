#include "dblock/default_store.hpp"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dblock/exit_codes.hpp"

namespace dblock::cli {

namespace {

namespace fs = std::filesystem;

constexpr const char* kSystemStateDir = "/var/lib/dblock";
// The one group an administrator grants write access to a store with (doc/threat-model.md): only
// root can create it or add members, so its members are trusted by root's decision.
constexpr const char* kSharedGroup = "dblock";
constexpr const char* kFileName = "dblock.db";
constexpr std::array<const char*, 3> kSiblings{"-wal", "-shm", "-journal"};
// The previous release's tables carried the default prefix; this one is in every dblock store.
constexpr std::string_view kDblockTable = "dblock_token_counter";
constexpr std::size_t kScanLimit = 8 << 20;

struct Account {
  std::string name;
  gid_t gid = 0;
  std::string home;
};

std::optional<Account> account_of(uid_t uid) {
  std::vector<char> buffer(1 << 14);
  passwd entry{};
  passwd* found = nullptr;
  if (::getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found) != 0 || found == nullptr) return std::nullopt;
  return Account{entry.pw_name, entry.pw_gid, entry.pw_dir != nullptr ? entry.pw_dir : ""};
}

std::optional<gid_t> group_id(const char* name) {
  std::vector<char> buffer(1 << 14);
  group entry{};
  group* found = nullptr;
  if (::getgrnam_r(name, &entry, buffer.data(), buffer.size(), &found) != 0 || found == nullptr) return std::nullopt;
  return entry.gr_gid;
}

std::string group_name(gid_t gid) {
  std::vector<char> buffer(1 << 14);
  group entry{};
  group* found = nullptr;
  if (::getgrgid_r(gid, &entry, buffer.data(), buffer.size(), &found) != 0 || found == nullptr)
    return fmt::format("gid {}", gid);
  return fmt::format("{} (gid {})", entry.gr_name, gid);
}

std::string user_label(uid_t uid) {
  auto account = account_of(uid);
  return account ? fmt::format("{} (uid {})", account->name, uid) : fmt::format("uid {}", uid);
}

bool is_member(uid_t uid, gid_t gid) {
  auto account = account_of(uid);
  if (!account) return false;
  if (account->gid == gid) return true;
  int count = 64;
  std::vector<gid_t> groups(static_cast<std::size_t>(count));
  while (::getgrouplist(account->name.c_str(), account->gid, groups.data(), &count) < 0)
    groups.resize(static_cast<std::size_t>(count));
  groups.resize(static_cast<std::size_t>(count));
  return std::find(groups.begin(), groups.end(), gid) != groups.end();
}

/// Who may write a store the caller uses: the caller, root (who can anyway), and the members of the
/// `dblock` group where the host has one. Anyone else could break the caller's locks or tokens.
struct Trust {
  uid_t caller = ::geteuid();
  std::optional<gid_t> shared = group_id(kSharedGroup);

  [[nodiscard]] bool owner(uid_t uid) const { return uid == caller || uid == 0 || (shared && is_member(uid, *shared)); }
  [[nodiscard]] bool group(gid_t gid) const { return gid == 0 || (shared && gid == *shared); }
};

enum class Role { ancestor, directory, file };

/// What is wrong with one path, and the commands that fix it. An ancestor directory may be
/// writable by everyone when it is sticky (/tmp): nobody can then rename or remove what we own in it.
class Findings {
 public:
  explicit Findings(const Trust& trust) : trust_(trust) {}

  void check(const fs::path& path, const struct stat& st, Role role) {
    auto mode = st.st_mode & 07777;
    if (S_ISLNK(st.st_mode)) {
      add(path, "is a symbolic link", fmt::format("rm {}", path.string()));
      return;
    }
    bool sticky_ancestor = role == Role::ancestor && (st.st_mode & S_ISVTX) != 0;
    if (!trust_.owner(st.st_uid))
      add(path, fmt::format("is owned by {}, who can change its mode", user_label(st.st_uid)),
          fmt::format("chown {} {}", account_of(trust_.caller) ? account_of(trust_.caller)->name : "root",
                      path.string()));
    bool others = (st.st_mode & S_IWOTH) != 0 && !sticky_ancestor;
    bool group = (st.st_mode & S_IWGRP) != 0 && !sticky_ancestor && !trust_.group(st.st_gid);
    if (others) world_writable_ = true;
    if (others)
      add(path, fmt::format("is writable by every user (mode {:04o})", mode),
          fmt::format("chmod {} {}", group ? "go-w" : "o-w", path.string()));
    else if (group)
      add(path, fmt::format("is writable by the group {} (mode {:04o})", group_name(st.st_gid), mode),
          fmt::format("chmod g-w {}", path.string()));
  }

  [[nodiscard]] bool empty() const { return what_.empty(); }

  [[nodiscard]] std::string message(const fs::path& file) const {
    std::string problems;
    for (auto& line : what_) problems += (problems.empty() ? "" : "; ") + line;
    std::string fixes;
    for (auto& line : fixes_) fixes += (fixes.empty() ? "" : " && ") + line;
    return fmt::format(
        "refusing the embedded default store sqlite://{}: another user could write it and so break its locks or "
        "reset its fencing tokens: {}. Fix: {} (as root, or as the owner){}. To share a store between users on "
        "purpose, give it the group '{}' (doc/threat-model.md); or name another store with --dsn or "
        "DBLOCK_STATE_DIR",
        file.string(), problems, fixes,
        world_writable_ ? "; the previous release made its store so (directory 1777, file 0666), and other users may "
                          "have changed its locks and token counter while it was writable"
                        : "",
        kSharedGroup);
  }

 private:
  void add(const fs::path& path, const std::string& what, const std::string& fix) {
    what_.push_back(fmt::format("{} {}", path.string(), what));
    fixes_.push_back(fix);
  }

  const Trust& trust_;
  bool world_writable_ = false;
  std::vector<std::string> what_;
  std::vector<std::string> fixes_;
};

fs::path state_directory() {
  if (const char* from_env = std::getenv("DBLOCK_STATE_DIR"); from_env != nullptr && *from_env != '\0') {
    fs::path dir = from_env;
    if (!dir.is_absolute())
      throw StoreRefused(kUsage, fmt::format("DBLOCK_STATE_DIR '{}' must be an absolute path", dir.string()));
    return dir.lexically_normal();
  }
  // root's jobs (cron, units running as root) share the host's store; every other user gets one of
  // their own, which no other unprivileged user can write (XDG base directories).
  if (::geteuid() == 0) return kSystemStateDir;
  if (const char* xdg = std::getenv("XDG_STATE_HOME"); xdg != nullptr && fs::path(xdg).is_absolute())
    return (fs::path(xdg) / "dblock").lexically_normal();
  std::string home;
  if (const char* from_env = std::getenv("HOME"); from_env != nullptr && fs::path(from_env).is_absolute())
    home = from_env;
  else if (auto account = account_of(::geteuid()); account && fs::path(account->home).is_absolute())
    home = account->home;
  if (home.empty())
    throw StoreRefused(kUsage, "no home directory for the embedded default store: set DBLOCK_STATE_DIR or --dsn");
  return (fs::path(home) / ".local" / "state" / "dblock").lexically_normal();
}

/// Creates the missing directories of `dir` with exactly `mode` (whatever the umask); the checks
/// after it decide whether what already existed may be used.
void make_directories(const fs::path& dir, mode_t mode) {
  fs::path partial;
  for (const auto& part : dir) {
    partial /= part;
    if (::mkdir(partial.c_str(), mode) != 0) {
      if (errno == EEXIST) continue;
      throw StoreRefused(kUnavailable,
                         fmt::format("the embedded default store's directory {} does not exist and cannot be created "
                                     "by this user ({}): set DBLOCK_STATE_DIR or --dsn",
                                     dir.string(), std::strerror(errno)));
    }
    // Through a descriptor that refuses a symbolic link swapped in after mkdir.
    int fd = ::open(partial.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      struct stat st {};
      if (::fstat(fd, &st) == 0 && st.st_uid == ::geteuid()) (void)::fchmod(fd, mode);
      ::close(fd);
    }
  }
}

std::vector<fs::path> prefixes(const fs::path& path) {
  std::vector<fs::path> out;
  fs::path partial;
  for (const auto& part : path) {
    partial /= part;
    out.push_back(partial);
  }
  if (!out.empty()) out.pop_back();  // the path itself is not its own ancestor
  return out;
}

void check_directory(const fs::path& dir, Findings& findings) {
  std::error_code error;
  auto real = fs::canonical(dir, error);
  if (error)
    throw StoreRefused(kUnavailable,
                       fmt::format("the embedded default store's directory {}: {}", dir.string(), error.message()));
  // Both spellings: a symbolic link's own directory matters as much as its target's ancestors.
  auto ancestors = prefixes(dir);
  for (auto& path : prefixes(real))
    if (std::find(ancestors.begin(), ancestors.end(), path) == ancestors.end()) ancestors.push_back(path);
  for (auto& path : ancestors) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) findings.check(path, st, Role::ancestor);
  }
  struct stat st {};
  if (::stat(real.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw StoreRefused(kUnavailable,
                       fmt::format("the embedded default store's directory {} is not a directory", dir.string()));
  findings.check(dir, st, Role::directory);
}

void create_file(const fs::path& dir, const fs::path& file, const Trust& trust) {
  struct stat dir_st {};
  if (::stat(dir.c_str(), &dir_st) != 0) return;
  // A directory an administrator shared with the dblock group (g+ws) makes files its members can
  // write; otherwise the file is the caller's alone (SQLite gives -wal and -shm this mode too).
  bool shared = (dir_st.st_mode & S_IWGRP) != 0 && trust.group(dir_st.st_gid);
  mode_t mode = shared ? 0660 : 0600;
  int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return;  // exists, or not creatable: the checks and SQLite's open say which
  (void)::fchmod(fd, mode);
  if (shared) (void)::fchown(fd, static_cast<uid_t>(-1), dir_st.st_gid);
  ::close(fd);
}

bool contains(const fs::path& path, std::string_view needle, bool sqlite_header) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::string bytes(kScanLimit, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  bytes.resize(static_cast<std::size_t>(in.gcount()));
  if (sqlite_header && !bytes.empty() && !bytes.starts_with(std::string_view("SQLite format 3\0", 16))) return false;
  return bytes.find(needle) != std::string::npos;
}

/// The previous release's default store was ./dblock.db: if one with dblock's tables is here, a
/// run of that release may still hold its locks there, which this release's store cannot see.
/// Read as bytes (its schema's text, in the file or its write-ahead log), never opened: opening
/// would take SQLite locks in, and possibly change, the other release's live file.
void refuse_previous_release_store(const fs::path& store_file) {
  struct stat here {};
  if (::stat(kFileName, &here) != 0 || !S_ISREG(here.st_mode)) return;
  struct stat ours {};
  if (::stat(store_file.c_str(), &ours) == 0 && ours.st_dev == here.st_dev && ours.st_ino == here.st_ino) return;
  bool dblock =
      contains(kFileName, kDblockTable, true) || contains(std::string(kFileName) + "-wal", kDblockTable, false);
  if (!dblock) return;
  std::error_code error;
  auto old = fs::current_path(error) / kFileName;
  throw StoreRefused(
      kConfig,
      fmt::format("{} is a dblock store, where the previous release kept its locks by default; this release's default "
                  "store is sqlite://{}, so a lock taken there would not exclude a run of the previous release still "
                  "using {}. Name the store: --dsn sqlite://{} (or DBLOCK_DSN) to go on with the old one, --dsn "
                  "sqlite://{} for the new one; or, once no previous release runs here, move it away (mv {} {}.old)",
                  old.string(), store_file.string(), old.string(), old.string(), store_file.string(), old.string(),
                  old.string()));
}

}  // namespace

std::string default_store_uri() { return "sqlite://" + (state_directory() / kFileName).string(); }

std::string open_default_store() {
  auto dir = state_directory();
  auto file = dir / kFileName;
  Trust trust;
  make_directories(dir, trust.caller == 0 ? 0755 : 0700);
  Findings findings(trust);
  check_directory(dir, findings);
  // Nothing is created in a directory that fails; its files are still checked, so that the message
  // names every fix at once.
  if (findings.empty()) create_file(dir, file, trust);
  // Not followed: a link would make the checks look at another file than SQLite's siblings.
  for (std::string suffix : {"", kSiblings[0], kSiblings[1], kSiblings[2]}) {
    fs::path path = file.string() + suffix;
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) findings.check(path, st, Role::file);
  }
  if (!findings.empty()) throw StoreRefused(kNoPermission, findings.message(file));
  if (::access(file.c_str(), R_OK | W_OK) != 0) {
    struct stat st {};
    (void)::stat(file.c_str(), &st);
    throw StoreRefused(kNoPermission,
                       fmt::format("the embedded default store sqlite://{} is not writable by this user (owner {}, "
                                   "mode {:04o}): it is another user's store; use your own (leave DBLOCK_STATE_DIR "
                                   "unset) or have its owner share it with the group '{}' (doc/threat-model.md)",
                                   file.string(), user_label(st.st_uid), st.st_mode & 07777, kSharedGroup));
  }
  refuse_previous_release_store(file);
  return "sqlite://" + file.string();
}

}  // namespace dblock::cli
