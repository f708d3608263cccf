#pragma once
// Deadlocks among fair-queue waiters (doc/fair-queue.md, "Deadlocks"): the cycle a waiter's wait
// closes in the wait graph the queue's rows make, and which of the cycle's waiters is told.

#include <string>
#include <string_view>
#include <vector>

#include "backends/queue_backend.hpp"

namespace dblock::detail {

/// The cycle that `waiter`'s wait for `name` closes in `edges`: its edges in order, the first one
/// `waiter`'s own, each next one's waiter the holder of the one before, the last one's holder
/// `waiter`. Empty when there is none, and when `edges` lacks `waiter`'s own edge (the name is free,
/// or the read did not reach it).
[[nodiscard]] std::vector<WaitEdge> find_wait_cycle(const std::vector<WaitEdge>& edges, std::string_view waiter,
                                                    std::string_view name);

/// The edge of `cycle` whose waiter is told: the one that queued last (equal orders: the greater
/// owner). Every waiter of the cycle that reads the same rows picks the same one, so one is told,
/// whoever looks. REQUIRES: `cycle` is not empty.
[[nodiscard]] const WaitEdge& deadlock_victim(const std::vector<WaitEdge>& cycle);

/// "A waits for 'x', held by B; B waits for 'y', held by A", every owner and name terminal-safe.
[[nodiscard]] std::string describe_wait_cycle(const std::vector<WaitEdge>& cycle);

}  // namespace dblock::detail
