// Why a TCP port cannot be listened on, for a start-up error that says so ("Address
// already in use") instead of what a library reports (gRPC's error tree, civetweb's
// "null context when constructing CivetServer").
#ifndef GEMMD_SERVER_PORT_PROBE_H_
#define GEMMD_SERVER_PORT_PROBE_H_

#include <string>

namespace gemmd {

// Binds and listens on host:port the way servers do (SO_REUSEADDR, no SO_REUSEPORT) and
// closes again: "" when that works, else the reason (strerror, or the name lookup's).
std::string WhyCannotListen(const std::string& host, int port);

}  // namespace gemmd

#endif  // GEMMD_SERVER_PORT_PROBE_H_
