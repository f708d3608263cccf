#include "dblock/run_terminal.hpp"

#include <fcntl.h>
#include <termios.h>
#include <unistd.h>

#include <optional>

namespace dblock::cli::detail {

JobControl::JobControl() : terminal_(::open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC)) {
  for (std::size_t i = 0; i < std::size(kJobControl); ++i)
    sigaction(kJobControl[i], nullptr, &command_dispositions_[i]);
  // Giving the terminal away and taking it back, and writing run's reports, from the background.
  if (terminal_) signal(SIGTTOU, SIG_IGN);
}

void JobControl::prepare(GuardSetup& setup) const {
  for (std::size_t i = 0; i < std::size(kJobControl); ++i) setup.job_control[i] = command_dispositions_[i];
  setup.terminal = in_foreground() ? terminal_.get() : -1;
}

void JobControl::follow_stop(pid_t group, int stop_signal, const std::function<bool()>& lease_gone, const Stderr& out) {
  if (!terminal_) return;
  int fd = terminal_.get();
  bool terminal_stop = stop_signal == SIGTTIN || stop_signal == SIGTTOU;
  bool stopped = false;
  std::optional<termios> modes;
  if (!(terminal_stop && in_foreground())) {
    if (tcgetpgrp(fd) == group) {
      termios saved{};
      if (tcgetattr(fd, &saved) == 0) modes = saved;
      tcsetpgrp(fd, getpgrp());
    }
    take_pending_sigcont();
    // SIGTTOU is ignored here; a discarded stop (an orphaned process group) returns at once.
    kill(0, stop_signal == SIGTTIN ? SIGTTIN : SIGTSTP);
    stopped = take_pending_sigcont();
  }
  if (lease_gone()) {
    kill(-group, SIGKILL);
    return;
  }
  if (in_foreground()) {
    if (modes) tcsetattr(fd, TCSADRAIN, &*modes);
    tcsetpgrp(fd, group);
  } else if (terminal_stop && !stopped) {
    // Nobody can bring this run to the foreground: the terminal is as good as hung up for it.
    out.say("warning", "the command stopped for the terminal, but dblock runs without job control; sending it SIGHUP");
    kill(-group, SIGHUP);
  }
  kill(-group, SIGCONT);
}

void JobControl::restore(pid_t group) const {
  if (terminal_ && tcgetpgrp(terminal_.get()) == group) tcsetpgrp(terminal_.get(), getpgrp());
}

bool JobControl::in_foreground() const { return terminal_ && tcgetpgrp(terminal_.get()) == getpgrp(); }

bool JobControl::take_pending_sigcont() {
  sigset_t cont;
  sigemptyset(&cont);
  sigaddset(&cont, SIGCONT);
  timespec now{};
  return sigtimedwait(&cont, nullptr, &now) == SIGCONT;
}

}  // namespace dblock::cli::detail
