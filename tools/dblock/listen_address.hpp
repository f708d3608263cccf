#pragma once
// Where the reaper sidecar listens: the --listen text, the addresses its host names, and whether an
// address is loopback (the CLI tests judge these directly: tests/cli/reaper_cli_test.cpp).

#include <netinet/in.h>
#include <sys/socket.h>

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

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

/// Parses HOST:PORT, or [IPV6]:PORT for an IPv6 address (which holds colons of its own).
/// @throws InvalidArgument saying which form is expected.
ListenAddress parse_listen(std::string_view text);

/// Whether connections to this address can only come from this host: 127.0.0.0/8.
bool is_loopback(const sockaddr_in& address);
/// Whether connections to this address can only come from this host: ::1, or 127.0.0.0/8 mapped
/// into IPv6 (::ffff:127.0.0.1). Not the wildcard ::, which takes connections from anywhere.
bool is_loopback(const sockaddr_in6& address);
/// The same for an address of any family; one of another family than IPv4 or IPv6 is not judged
/// loopback (when unsure, the status page stays off).
bool is_loopback(const sockaddr_storage& address);

/// One address a listen host names.
struct ListenCandidate {
  sockaddr_storage address{};
  std::string numeric;  // its numeric spelling ("127.0.0.1", "::1", "fe80::1%eth0"): httplib, which
                        // resolves the text it is given, then binds exactly this address
};

/// The addresses `host` names (a name is looked up as the system resolves it, e.g. /etc/hosts), in
/// the order a listener tries them. @throws ListenError when it names none.
std::vector<ListenCandidate> resolve_listen_host(const std::string& host);

/// HOST:PORT with an IPv6 address in brackets, as --listen takes it and as logs show it.
std::string format_endpoint(std::string_view host, int port);

}  // namespace dblock::cli
