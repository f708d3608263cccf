// The command the nemesis suite runs under `dblock run`: it records, on CLOCK_MONOTONIC (the
// steady clock of every process on this machine), when its work began and the last instant it
// worked, with the fencing token it was given, until its work time is up or it is killed.
// Usage: nemesis_worker RECORD_FILE WORK_MS

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <thread>

namespace {

std::int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Record {
  std::int64_t token, first_work_ns, last_work_ns, pid;
};

}  // namespace

int main(int argc, char** argv) {
  const char* token = std::getenv("DBLOCK_FENCING_TOKEN");
  if (argc != 3 || token == nullptr) return 64;
  int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return 73;
  Record record{std::atoll(token), monotonic_ns(), 0, getpid()};
  auto until = record.first_work_ns + std::atoll(argv[2]) * 1'000'000;
  while (true) {
    record.last_work_ns = monotonic_ns();  // one step of work, done now
    if (pwrite(fd, &record, sizeof record, 0) != sizeof record) return 74;
    if (record.last_work_ns >= until) return 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the work's own pace
  }
}
