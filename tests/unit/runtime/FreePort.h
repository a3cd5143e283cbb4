//===- tests/unit/runtime/FreePort.h - A rendezvous port ----*- C++ -*-===//
//
// For unit tests whose ranks meet over TCP on this host, in threads.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TESTS_UNIT_RUNTIME_FREEPORT_H
#define PPC_TESTS_UNIT_RUNTIME_FREEPORT_H

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace ppc::testing {

/// A TCP port on 127.0.0.1 that nothing listened on a moment ago.
inline int freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

} // namespace ppc::testing

#endif // PPC_TESTS_UNIT_RUNTIME_FREEPORT_H
