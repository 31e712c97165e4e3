// gRPC's and protobuf's own messages, in the server's log: one logfmt line each
// (grpc_log, protobuf_log), through a rate limiter, so a flood of junk connections or
// unparsable requests cannot flood the log (at most 20 lines at once, then 10 a second,
// each saying how many were held back since the last one). gRPC's handshake failures
// carry no peer address in gRPC 1.51's own message, so the lines cannot name it either.
#ifndef GEMMD_SERVER_LIBRARY_LOGS_H_
#define GEMMD_SERVER_LIBRARY_LOGS_H_

namespace gemmd {

// Process-wide; call once, before the server starts (not thread-safe).
void RouteLibraryLogs();

}  // namespace gemmd

#endif  // GEMMD_SERVER_LIBRARY_LOGS_H_
