// A cycle in the fair queue's wait graph, found from one waiter's own edge by a depth-first walk
// that visits each owner once, and the rule that picks the one waiter of it that is told.
#include "core/wait_cycle.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "base/terminal_text.hpp"

namespace dblock::detail {

std::vector<WaitEdge> find_wait_cycle(const std::vector<WaitEdge>& edges, std::string_view waiter,
                                      std::string_view name) {
  using Out = std::multimap<std::string_view, const WaitEdge*>;
  Out out;  // each owner's waits
  const WaitEdge* own = nullptr;
  for (const auto& edge : edges) {
    out.emplace(edge.waiter, &edge);
    if (edge.waiter == waiter && edge.name == name) own = &edge;
  }
  if (own == nullptr) return {};
  if (own->holder == waiter) return {*own};
  struct Step {
    const WaitEdge* edge;
    Out::const_iterator next, end;
  };
  std::set<std::string_view> visited{waiter, own->holder};
  auto [first, last] = out.equal_range(own->holder);
  std::vector<Step> path{Step{own, first, last}};
  while (!path.empty()) {
    auto& step = path.back();
    if (step.next == step.end) {
      path.pop_back();
      continue;
    }
    const WaitEdge* edge = (step.next++)->second;
    if (edge->holder == waiter) {
      std::vector<WaitEdge> cycle;
      for (const auto& taken : path) cycle.push_back(*taken.edge);
      cycle.push_back(*edge);
      return cycle;
    }
    if (!visited.insert(edge->holder).second) continue;
    auto [from, to] = out.equal_range(edge->holder);
    path.push_back(Step{edge, from, to});
  }
  return {};
}

const WaitEdge& deadlock_victim(const std::vector<WaitEdge>& cycle) {
  return *std::max_element(cycle.begin(), cycle.end(), [](const WaitEdge& a, const WaitEdge& b) {
    return std::tie(a.queued_order, a.waiter) < std::tie(b.queued_order, b.waiter);
  });
}

std::string describe_wait_cycle(const std::vector<WaitEdge>& cycle) {
  std::string text;
  for (const auto& edge : cycle) {
    if (!text.empty()) text += "; ";
    text += fmt::format("{} waits for '{}', held by {}", terminal_safe(edge.waiter), terminal_safe(edge.name),
                        terminal_safe(edge.holder));
  }
  return text;
}

}  // namespace dblock::detail
