// `dblock locks`, `dblock leader NAME` and `dblock release --force NAME`: the operator's view of the
// lock table and its break-glass.
#include <string>

#include <dblock/errors.hpp>
#include <dblock/text.hpp>

#include "dblock/commands/command.hpp"
#include "dblock/leader_command.hpp"
#include "dblock/locks_command.hpp"
#include "dblock/release_command.hpp"

namespace dblock::cli {
namespace {

class LocksCommand final : public Command {
 public:
  explicit LocksCommand(CLI::App& app)
      : Command(*app.add_subcommand("locks", "List locks with owner, count, token and lease left")) {
    parser_->add_flag("--json", json_, "Print JSON");
  }
  int run(const Invocation& invocation) override {
    print_locks(*open_checked_store(invocation), json_);
    return 0;
  }

 private:
  bool json_ = false;
};

class LeaderCommand final : public Command {
 public:
  explicit LeaderCommand(CLI::App& app)
      : Command(*app.add_subcommand("leader",
                                    "Print who leads a name now (owner, token, since when, lease left); "
                                    "exit 1 when nobody does")) {
    parser_->add_option("name", name_, "Lock name the election campaigns for")->required();
    parser_->add_flag("--json", json_, "Print JSON");
  }
  int run(const Invocation& invocation) override { return print_leader(*open_checked_store(invocation), name_, json_); }

 private:
  std::string name_;
  bool json_ = false;
};

class ReleaseCommand final : public Command {
 public:
  explicit ReleaseCommand(CLI::App& app)
      : Command(*app.add_subcommand(
            "release", "Operator's break-glass: revoke a lock whoever holds it; or ask its holder to let go (--ask)")) {
    auto* ask = parser_->add_flag("--ask", ask_,
                                  "Ask the holder to let go instead: nothing is taken from it; it hears at its next "
                                  "renewal (a `dblock run` holder passes it on as its --ask-signal) and releases when "
                                  "its work allows. Needs no --force");
    parser_->add_flag("--force", force_,
                      "Required: confirms breaking someone else's lock. The holder is revoked: told at its next "
                      "renewal that it lost the lock, and the name is free once it lets go or its lease ends, not "
                      "before");
    parser_->add_flag("--unsafe-delete", unsafe_delete_,
                      "With --force: delete the row at once instead. UNSAFE unless the holder is known to be dead: "
                      "a live holder keeps working until its next renewal while the next one is already granted");
    parser_->add_option("name", name_, "Lock name")->required();
    ask->excludes("--force")->excludes("--unsafe-delete");
  }
  int run(const Invocation& invocation) override {
    validate_lock_name(name_);
    if (ask_) return run_release_ask(*open_checked_store(invocation), name_);
    if (!force_) throw InvalidArgument("release breaks another owner's lock: add --force to confirm (or --ask)");
    return run_release(*open_checked_store(invocation), name_, unsafe_delete_);
  }

 private:
  bool ask_ = false;
  bool force_ = false;
  bool unsafe_delete_ = false;
  std::string name_;
};

}  // namespace

std::unique_ptr<Command> add_locks_command(CLI::App& app) { return std::make_unique<LocksCommand>(app); }
std::unique_ptr<Command> add_leader_command(CLI::App& app) { return std::make_unique<LeaderCommand>(app); }
std::unique_ptr<Command> add_release_command(CLI::App& app) { return std::make_unique<ReleaseCommand>(app); }

}  // namespace dblock::cli
