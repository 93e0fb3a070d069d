#include "core/net_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace moe {
namespace {

// "h:p" or "[v6]:p" -> {host, port}; empty host when there is no port.
std::pair<std::string, std::string> SplitHostPort(absl::string_view hp) {
  if (absl::StartsWith(hp, "[")) {
    const size_t close = hp.find(']');
    if (close == absl::string_view::npos || close + 1 >= hp.size() ||
        hp[close + 1] != ':') {
      return {};
    }
    return {std::string(hp.substr(1, close - 1)),
            std::string(hp.substr(close + 2))};
  }
  const size_t colon = hp.rfind(':');
  if (colon == absl::string_view::npos) return {};
  return {std::string(hp.substr(0, colon)), std::string(hp.substr(colon + 1))};
}

absl::string_view StripScheme(absl::string_view target) {
  for (absl::string_view scheme : {"ipv4:", "ipv6:"}) {
    if (absl::StartsWith(target, scheme)) {
      target.remove_prefix(scheme.size());
      // A list of addresses: the first one is enough.
      return target.substr(0, target.find(','));
    }
  }
  if (absl::StartsWith(target, "dns:")) {
    target.remove_prefix(4);
    if (absl::StartsWith(target, "//")) {  // dns://authority/host:port
      target.remove_prefix(2);
      target.remove_prefix(std::min(target.find('/'), target.size()));
    }
    if (absl::StartsWith(target, "/")) target.remove_prefix(1);
  }
  return target;
}

// Why binding `address` fails now, in words; empty when it binds.
std::string BindProbe(absl::string_view address) {
  if (absl::StartsWith(address, "unix")) return "";
  auto [host, port] = SplitHostPort(address);
  if (port.empty()) return "expected HOST:PORT";
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_family = AF_UNSPEC;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  // An empty host (":50051") is every interface, as in gRPC.
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(),
                           &hints, &res);
      rc != 0) {
    return absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc));
  }
  int error = 0;
  // gRPC binds every address a name resolves to: the first that fails tells.
  for (addrinfo* ai = res; ai != nullptr && error == 0; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) error = errno;
    close(fd);
  }
  freeaddrinfo(res);
  switch (error) {
    case 0:
      return "";
    case EADDRINUSE:
      return "address already in use (another process is listening there); "
             "pick a free port";
    case EACCES:
      return "permission denied (ports below 1024 need root or "
             "CAP_NET_BIND_SERVICE); pick a port above 1023";
    case EADDRNOTAVAIL:
      return "address not available (no interface of this host has it); "
             "listen on 0.0.0.0 or an address of this host";
    default:
      return std::strerror(error);
  }
}

}  // namespace

absl::StatusOr<std::string> LocalAddressToward(absl::string_view target) {
  if (absl::StartsWith(target, "unix")) return std::string("127.0.0.1");
  auto [host, port] = SplitHostPort(StripScheme(target));
  if (host.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no host:port in router address '", target, "'"));
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_family = AF_UNSPEC;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  std::string error = "no address";
  std::string local;
  for (addrinfo* ai = res; ai != nullptr && local.empty(); ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
      error = std::strerror(errno);
    } else {
      char buf[INET6_ADDRSTRLEN] = {};
      const void* addr =
          ss.ss_family == AF_INET
              ? static_cast<const void*>(
                    &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr)
              : static_cast<const void*>(
                    &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr);
      if (inet_ntop(ss.ss_family, addr, buf, sizeof(buf)) != nullptr) {
        local = buf;
      }
    }
    close(fd);
  }
  freeaddrinfo(res);
  if (local.empty()) {
    return absl::UnavailableError(
        absl::StrCat("no route to '", host, "': ", error));
  }
  return local;
}

absl::Status ListenFailure(absl::string_view flag, absl::string_view address,
                           absl::string_view detail) {
  std::string cause = BindProbe(address);
  if (cause.empty()) {
    // The port binds now: it was taken for a moment, or the server refused
    // the address for a reason of its own.
    cause = detail.empty() ? "cannot listen there (see the lines above)"
                           : absl::StrCat("cannot listen there: ", detail);
  }
  return absl::UnavailableError(absl::StrCat(flag, " ", address, ": ", cause));
}

absl::Status CheckCanListen(absl::string_view flag, absl::string_view address) {
  if (BindProbe(address).empty()) return absl::OkStatus();
  return ListenFailure(flag, address);
}

bool IsLoopbackHost(absl::string_view host) {
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    host = host.substr(1, host.size() - 2);
  }
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  in_addr v4{};
  if (inet_pton(AF_INET, std::string(host).c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, std::string(host).c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

bool IsLoopbackPeer(absl::string_view peer) {
  if (absl::StartsWith(peer, "unix")) return true;
  // gRPC may percent-encode the brackets: "ipv6:%5B::1%5D:5".
  const std::string decoded = absl::StrReplaceAll(
      peer, {{"%5B", "["}, {"%5D", "]"}, {"%5b", "["}, {"%5d", "]"}});
  for (absl::string_view scheme : {"ipv4:", "ipv6:"}) {
    if (absl::StartsWith(decoded, scheme)) {
      return IsLoopbackHost(
          SplitHostPort(absl::string_view(decoded).substr(scheme.size()))
              .first);
    }
  }
  return false;
}

}  // namespace moe
