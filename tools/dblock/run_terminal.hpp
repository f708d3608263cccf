#pragma once
// `run`'s side of job control: the command's group gets the terminal and stops and continues as
// the command alone would under its shell.
#include <signal.h>
#include <sys/types.h>

#include <functional>
#include <iterator>

#include "dblock/logging.hpp"
#include "dblock/run_processes.hpp"

namespace dblock::cli::detail {

/// The wrapper's side of job control, when it has a controlling terminal.
class JobControl {
 public:
  JobControl();

  /// Copies what the guard needs: the command's dispositions, and the terminal when `run` is in
  /// its foreground (else the command starts in the background, as `run` itself).
  void prepare(GuardSetup& setup) const;

  /// The command stopped: by Ctrl-Z, or reading or writing the terminal from the background. `run`
  /// stops with it (its own process group, as the command alone would stop its shell's job), giving
  /// the terminal back. Continued (`fg`, `bg`), it hands the terminal over again if it has it and
  /// continues the command, unless the lease ran out meanwhile (the guard kills the group at the
  /// deadline; a stopped wrapper renews nothing): then the group is killed, never continued.
  /// Without a controlling terminal the command stays stopped until someone continues it.
  void follow_stop(pid_t group, int stop_signal, const std::function<bool()>& lease_gone, const Stderr& out);

  /// Gives the terminal back when the command's group still has it.
  void restore(pid_t group) const;

 private:
  [[nodiscard]] bool in_foreground() const;
  static bool take_pending_sigcont();

  Fd terminal_;
  struct sigaction command_dispositions_[std::size(kJobControl)] = {};
};

}  // namespace dblock::cli::detail
