#pragma once
// What the process tests read: a file's whole text, a process's state from /proc, and the outcome
// of a command run to its end.

#include <sys/types.h>

#include <fstream>
#include <iterator>
#include <string>

namespace dblock::test {

/// The whole file; "" when it cannot be read (a process's /proc entry that is gone).
inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// The state letter of /proc/PID/stat; '\0' when the process is gone (reaped).
inline char process_state(pid_t pid) {
  auto text = read_text("/proc/" + std::to_string(pid) + "/stat");
  auto after_name = text.rfind(") ");
  return after_name == std::string::npos || after_name + 2 >= text.size() ? '\0' : text[after_name + 2];
}

/// Neither gone nor a zombie.
inline bool process_alive(pid_t pid) {
  auto state = process_state(pid);
  return state != '\0' && state != 'Z';
}

/// A command run to its end.
struct CommandOutcome {
  int exit_code = -1;  // 128 + the signal when a signal ended it
  std::string output;  // stdout and stderr together
  int signal = 0;      // the signal that ended it; 0 when it exited
};

}  // namespace dblock::test
