// The fair queue's deadlock rule over hand-made wait graphs (src/core/wait_cycle.hpp): which cycle
// a waiter closes, that every waiter of a cycle picks the same one to tell, and what the message says.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/wait_cycle.hpp"

namespace {

using dblock::detail::WaitEdge;

std::vector<std::string> waiters_of(const std::vector<WaitEdge>& cycle) {
  std::vector<std::string> owners;
  for (const auto& edge : cycle) owners.push_back(edge.waiter);
  return owners;
}

TEST(WaitCycle, TwoOwnersWaitingForEachOthersNamesCloseACycleFromEitherSide) {
  std::vector<WaitEdge> edges{{"A", "y", "B", 1}, {"B", "x", "A", 2}};
  auto from_b = dblock::detail::find_wait_cycle(edges, "B", "x");
  ASSERT_EQ(waiters_of(from_b), (std::vector<std::string>{"B", "A"}));
  EXPECT_EQ(from_b.front().name, "x");
  EXPECT_EQ(waiters_of(dblock::detail::find_wait_cycle(edges, "A", "y")), (std::vector<std::string>{"A", "B"}));
  // Both read the same rows and tell the same waiter: the one that queued last.
  EXPECT_EQ(dblock::detail::deadlock_victim(from_b).waiter, "B");
  EXPECT_EQ(dblock::detail::deadlock_victim(dblock::detail::find_wait_cycle(edges, "A", "y")).waiter, "B");
}

TEST(WaitCycle, AChainThatDoesNotComeBackIsNoCycle) {
  // A waits for B, B for C, C for D, who waits for nobody; E waits for A from outside.
  std::vector<WaitEdge> edges{{"A", "b", "B", 1}, {"B", "c", "C", 2}, {"C", "d", "D", 3}, {"E", "a", "A", 4}};
  for (const auto& edge : edges)
    EXPECT_TRUE(dblock::detail::find_wait_cycle(edges, edge.waiter, edge.name).empty()) << edge.waiter;
}

TEST(WaitCycle, AWaiterOutsideACycleIsNotInIt) {
  // A and B wait for each other; E waits for A's name. E's wait closes nothing: the cycle is not its.
  std::vector<WaitEdge> edges{{"A", "b", "B", 1}, {"B", "a", "A", 2}, {"E", "a", "A", 3}};
  EXPECT_TRUE(dblock::detail::find_wait_cycle(edges, "E", "a").empty());
  EXPECT_EQ(dblock::detail::deadlock_victim(dblock::detail::find_wait_cycle(edges, "A", "b")).waiter, "B");
}

TEST(WaitCycle, ALongCycleIsFoundPastDeadEndsAndItsLastQueuedWaiterIsTold) {
  // A -> B -> C -> D -> A, with a branch: B also has an older row for a name D2 holds, a dead end.
  std::vector<WaitEdge> edges{
      {"B", "d2", "D2", 0}, {"A", "b", "B", 5}, {"B", "c", "C", 9}, {"C", "d", "D", 7}, {"D", "a", "A", 3}};
  auto cycle = dblock::detail::find_wait_cycle(edges, "A", "b");
  ASSERT_EQ(waiters_of(cycle), (std::vector<std::string>{"A", "B", "C", "D"}));
  EXPECT_EQ(cycle.back().holder, "A");
  EXPECT_EQ(dblock::detail::deadlock_victim(cycle).waiter, "B");  // queued at 9, the last
  for (const auto& edge : cycle)
    EXPECT_EQ(dblock::detail::deadlock_victim(dblock::detail::find_wait_cycle(edges, edge.waiter, edge.name)).waiter,
              "B")
        << "seen from " << edge.waiter;
}

TEST(WaitCycle, EqualQueueOrdersAreBrokenByTheOwnerTheSameWayFromEverySide) {
  std::vector<WaitEdge> edges{{"A", "b", "B", 4}, {"B", "a", "A", 4}};
  EXPECT_EQ(dblock::detail::deadlock_victim(dblock::detail::find_wait_cycle(edges, "A", "b")).waiter, "B");
  EXPECT_EQ(dblock::detail::deadlock_victim(dblock::detail::find_wait_cycle(edges, "B", "a")).waiter, "B");
}

TEST(WaitCycle, AWaiterWhoseOwnEdgeWasNotReadFindsNothing) {
  std::vector<WaitEdge> edges{{"B", "x", "A", 2}};
  EXPECT_TRUE(dblock::detail::find_wait_cycle(edges, "A", "y").empty());
}

TEST(WaitCycle, TheDescriptionNamesEveryEdgeWithHostileTextEscaped) {
  std::vector<WaitEdge> cycle{{"A", "x\n\x1b[31m", "B", 1}, {"B", "y", "A", 2}};
  auto text = dblock::detail::describe_wait_cycle(cycle);
  EXPECT_EQ(text, "A waits for 'x\\x0a\\x1b[31m', held by B; B waits for 'y', held by A");
}

}  // namespace
