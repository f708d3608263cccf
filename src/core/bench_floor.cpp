#include "core/bench_floor.hpp"

#include "core/store_parts.hpp"

namespace dblock::detail {

BenchFloor::BenchFloor(Store& store)
    : bench_(StoreParts::backend(store).bench().get()), locks_(StoreParts::backend(store).locks()) {}

std::unique_ptr<RawLockClient> BenchFloor::raw_client() { return bench_.raw_client(); }

std::unique_ptr<RawLockClient> BenchFloor::hand_written_client(HandWritten how) {
  return bench_.hand_written_client(how);
}

std::unique_ptr<RawWriteClient> BenchFloor::raw_write_client() { return bench_.raw_write_client(); }

std::unique_ptr<RawBatchClient> BenchFloor::ceiling_client() { return bench_.ceiling_client(); }

void BenchFloor::seed_expired(std::string_view stem, std::size_t count) { bench_.seed_expired(stem, count); }

std::size_t BenchFloor::renew(std::span<const HeldRef> held) {
  return locks_.renew(held, std::chrono::steady_clock::time_point::max()).renewed.size();
}

}  // namespace dblock::detail
