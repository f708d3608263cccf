#pragma once
// Where the reaper sidecar listens: the --listen text, the addresses its host names, and whether an
// address is loopback. Header-only so that the CLI tests judge these directly, without the CLI.

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <dblock/errors.hpp>

namespace dblock::cli {

struct ListenAddress {
  std::string host;  // a name or a numeric address; an IPv6 address without its brackets
  int port = 0;
};

/// The host cannot be resolved or none of its addresses can be bound: the sidecar exits 71.
class ListenError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace listen_detail {

struct AddrinfoFree {
  void operator()(addrinfo* list) const { freeaddrinfo(list); }
};
using AddrinfoList = std::unique_ptr<addrinfo, AddrinfoFree>;

/// getaddrinfo for a TCP listener, as httplib's bind_to_port asks (no AI_ADDRCONFIG: it drops ::1
/// on a host whose only IPv6 address is ::1). Returns getaddrinfo's code.
inline int resolve(const std::string& host, int flags, int family, AddrinfoList& list) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags;
  addrinfo* found = nullptr;
  int code = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  list.reset(found);
  return code;
}

}  // namespace listen_detail

/// Parses HOST:PORT, or [IPV6]:PORT for an IPv6 address (which holds colons of its own).
/// @throws InvalidArgument saying which form is expected.
inline ListenAddress parse_listen(std::string_view text) {
  auto invalid = [text](std::string_view why) { return InvalidArgument(fmt::format("--listen '{}' {}", text, why)); };
  std::string_view host;
  std::string_view port_text;
  if (text.starts_with('[')) {
    auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 == text.size() || text[close + 1] != ':')
      throw invalid("must be [IPV6]:PORT, e.g. [::1]:9464");
    host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
    listen_detail::AddrinfoList numeric;
    if (listen_detail::resolve(std::string(host), AI_NUMERICHOST, AF_INET6, numeric) != 0)
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

/// Whether connections to this address can only come from this host: 127.0.0.0/8.
inline bool is_loopback(const sockaddr_in& address) { return (ntohl(address.sin_addr.s_addr) >> 24) == 127; }

/// Whether connections to this address can only come from this host: ::1, or 127.0.0.0/8 mapped
/// into IPv6 (::ffff:127.0.0.1). Not the wildcard ::, which takes connections from anywhere.
inline bool is_loopback(const sockaddr_in6& address) {
  return IN6_IS_ADDR_LOOPBACK(&address.sin6_addr) ||
         (IN6_IS_ADDR_V4MAPPED(&address.sin6_addr) && address.sin6_addr.s6_addr[12] == 127);
}

/// The same for an address of any family; one of another family than IPv4 or IPv6 is not judged
/// loopback (when unsure, the status page stays off).
inline bool is_loopback(const sockaddr_storage& address) {
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

/// One address a listen host names.
struct ListenCandidate {
  sockaddr_storage address{};
  std::string numeric;  // its numeric spelling ("127.0.0.1", "::1", "fe80::1%eth0"): httplib, which
                        // resolves the text it is given, then binds exactly this address
};

/// The addresses `host` names (a name is looked up as the system resolves it, e.g. /etc/hosts), in
/// the order a listener tries them. @throws ListenError when it names none.
inline std::vector<ListenCandidate> resolve_listen_host(const std::string& host) {
  listen_detail::AddrinfoList list;
  if (int code = listen_detail::resolve(host, 0, AF_UNSPEC, list); code != 0)
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

/// HOST:PORT with an IPv6 address in brackets, as --listen takes it and as logs show it.
inline std::string format_endpoint(std::string_view host, int port) {
  return host.find(':') == std::string_view::npos ? fmt::format("{}:{}", host, port)
                                                  : fmt::format("[{}]:{}", host, port);
}

}  // namespace dblock::cli
