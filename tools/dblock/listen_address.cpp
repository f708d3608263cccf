#include "dblock/listen_address.hpp"

#include <arpa/inet.h>
#include <netdb.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <memory>

#include <fmt/format.h>
#include <dblock/errors.hpp>

namespace dblock::cli {

namespace {

struct AddrinfoFree {
  void operator()(addrinfo* list) const { freeaddrinfo(list); }
};
using AddrinfoList = std::unique_ptr<addrinfo, AddrinfoFree>;

/// getaddrinfo for a TCP listener, as httplib's bind_to_port asks (no AI_ADDRCONFIG: it drops ::1
/// on a host whose only IPv6 address is ::1). Returns getaddrinfo's code.
int resolve(const std::string& host, int flags, int family, AddrinfoList& list) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags;
  addrinfo* found = nullptr;
  int code = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  list.reset(found);
  return code;
}

}  // namespace

ListenAddress parse_listen(std::string_view text) {
  auto invalid = [text](std::string_view why) { return InvalidArgument(fmt::format("--listen '{}' {}", text, why)); };
  std::string_view host;
  std::string_view port_text;
  if (text.starts_with('[')) {
    auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 == text.size() || text[close + 1] != ':')
      throw invalid("must be [IPV6]:PORT, e.g. [::1]:9464");
    host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
    AddrinfoList numeric;
    if (resolve(std::string(host), AI_NUMERICHOST, AF_INET6, numeric) != 0)
      throw invalid(fmt::format("holds '{}' in brackets, which is not an IPv6 address", host));
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string_view::npos) throw invalid("must be HOST:PORT, e.g. 127.0.0.1:9464");
    host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos)
      throw invalid("has an IPv6 address without brackets: write it [IPV6]:PORT, e.g. [::1]:9464");
  }
  if (host.empty()) throw invalid("has no host: it must be HOST:PORT, e.g. 127.0.0.1:9464");
  int port = -1;
  auto [end, error] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || error != std::errc() || end != port_text.data() + port_text.size() || port < 0 ||
      port > 65535)
    throw invalid(fmt::format("has port '{}': it must be a number from 0 to 65535", port_text));
  return {std::string(host), port};
}

bool is_loopback(const sockaddr_in& address) { return (ntohl(address.sin_addr.s_addr) >> 24) == 127; }

bool is_loopback(const sockaddr_in6& address) {
  return IN6_IS_ADDR_LOOPBACK(&address.sin6_addr) ||
         (IN6_IS_ADDR_V4MAPPED(&address.sin6_addr) && address.sin6_addr.s6_addr[12] == 127);
}

bool is_loopback(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET) {
    sockaddr_in v4{};
    std::memcpy(&v4, &address, sizeof v4);
    return is_loopback(v4);
  }
  if (address.ss_family == AF_INET6) {
    sockaddr_in6 v6{};
    std::memcpy(&v6, &address, sizeof v6);
    return is_loopback(v6);
  }
  return false;
}

std::vector<ListenCandidate> resolve_listen_host(const std::string& host) {
  AddrinfoList list;
  if (int code = resolve(host, 0, AF_UNSPEC, list); code != 0)
    throw ListenError(fmt::format("cannot resolve '{}': {}", host, gai_strerror(code)));
  std::vector<ListenCandidate> candidates;
  for (const addrinfo* entry = list.get(); entry != nullptr; entry = entry->ai_next) {
    if (entry->ai_family != AF_INET && entry->ai_family != AF_INET6) continue;
    ListenCandidate candidate;
    std::memcpy(&candidate.address, entry->ai_addr, std::min<std::size_t>(entry->ai_addrlen, sizeof candidate.address));
    char numeric[NI_MAXHOST];
    if (getnameinfo(entry->ai_addr, entry->ai_addrlen, numeric, sizeof numeric, nullptr, 0, NI_NUMERICHOST) != 0)
      continue;
    candidate.numeric = numeric;
    candidates.push_back(std::move(candidate));
  }
  if (candidates.empty()) throw ListenError(fmt::format("'{}' names no IPv4 or IPv6 address", host));
  return candidates;
}

std::string format_endpoint(std::string_view host, int port) {
  return host.find(':') == std::string_view::npos ? fmt::format("{}:{}", host, port)
                                                  : fmt::format("[{}]:{}", host, port);
}

}  // namespace dblock::cli
