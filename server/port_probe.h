// Why a TCP port or a Unix domain socket cannot be listened on, for a start-up error that
// says so ("Address already in use") instead of what a library reports (gRPC's error
// tree, civetweb's "null context when constructing CivetServer").
#ifndef GEMMD_SERVER_PORT_PROBE_H_
#define GEMMD_SERVER_PORT_PROBE_H_

#include <string>

namespace gemmd {

// Binds and listens on host:port the way servers do (SO_REUSEADDR, no SO_REUSEPORT) and
// closes again: "" when that works, else the reason (strerror, or the name lookup's).
std::string WhyCannotListen(const std::string& host, int port);

// Why a Unix domain socket cannot be made at `path`: "" when nothing is there, or only a
// socket nobody listens on (a server that died; gRPC replaces it); else the reason: a
// server answering there already (gRPC would silently take its path), a file that is not
// a socket, a directory that is missing, or a path too long for a socket address.
std::string WhyCannotListenUnix(const std::string& path);

}  // namespace gemmd

#endif  // GEMMD_SERVER_PORT_PROBE_H_
