// Connections a client keeps open between calls, for the calls that move their bytes over
// several at once (parallel uploads and downloads of resident tensors, striped Matmuls):
// one HTTP/2 connection carries a fraction of what TCP can (docs/BENCHMARKS.md,
// "Striped calls"), and opening a connection per call costs more than a call-sized
// tensor gains from it. Connection i is made on first use and kept; gRPC reconnects it
// when it drops.
//
// Every connection of a pool must reach the same server process: a striped call's parts
// name tensors only that process holds. ConnectionPool(endpoint) therefore says whether
// its target names one address (single_address()); a target that balances over replicas
// ("dns:///…", "ipv4:A,B") may send each connection to another one. A striped call that
// finds its parts on two processes anyway (a host name with several addresses) calls
// MarkSpread, and is made again on one connection.
// Thread-safe.
#ifndef GEMMD_CLIENT_CONNECTION_POOL_H_
#define GEMMD_CLIENT_CONNECTION_POOL_H_

#include <grpcpp/channel.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "client/gemm_client.h"
#include "client/part_workers.h"

namespace gemmd {

// Whether a gRPC target names exactly one server address ("host:port", "unix:PATH",
// "ipv4:1.2.3.4:5" with no second address), so every connection to it reaches one process.
bool SingleAddressTarget(absl::string_view target);

class ConnectionPool {
 public:
  using ConnectFn = std::function<std::shared_ptr<grpc::ChannelInterface>(int index)>;

  // Connection i is connect(i). `single_address`: see single_address().
  explicit ConnectionPool(ConnectFn connect, bool single_address = true);
  // Connection i is ConnectChannel(endpoint, first_index + i): its own TCP connection, with
  // the endpoint's security, without client-side health checking (it carries the later
  // RPCs of calls begun elsewhere, which a draining server still serves). Keep
  // first_index clear of the indexes the caller's other channels use, or a pool
  // connection is shared with them.
  explicit ConnectionPool(const Endpoint& endpoint, int first_index = 1);
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  // Connection `index` (>= 0), made on first use.
  std::shared_ptr<grpc::ChannelInterface> Channel(int index);
  // Every connection reaches one server process, so one call may spread over them.
  bool single_address() const { return single_address_.load(std::memory_order_relaxed); }
  // They do not: calls stop spreading over this pool.
  void MarkSpread();
  // The threads that run parts over these connections.
  PartWorkers& workers() { return workers_; }

 private:
  const ConnectFn connect_;
  std::atomic<bool> single_address_;
  absl::Mutex mu_;
  std::vector<std::shared_ptr<grpc::ChannelInterface>> channels_ ABSL_GUARDED_BY(mu_);
  PartWorkers workers_;  // last: ended first, before the connections they use
};

}  // namespace gemmd

#endif  // GEMMD_CLIENT_CONNECTION_POOL_H_
