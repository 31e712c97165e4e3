#include "client/connection_pool.h"

#include <utility>

#include <grpc/grpc.h>

#include "absl/strings/match.h"

namespace gemmd {

bool SingleAddressTarget(absl::string_view target) {
  // A name service may answer with many addresses; a list has a comma.
  if (absl::StrContains(target, ',')) return false;
  for (absl::string_view resolver : {"dns:", "xds:", "ipv4:", "ipv6:", "unix:", "unix-abstract:"}) {
    if (absl::StartsWith(target, resolver)) {
      return resolver != "dns:" && resolver != "xds:";
    }
  }
  // "host:port" goes to DNS too, and a name with several addresses would be balanced
  // over them; taken as one server (the usual case), and corrected by MarkSpread when a
  // striped call finds otherwise.
  return true;
}

void ConnectionPool::MarkSpread() { single_address_.store(false, std::memory_order_relaxed); }

ConnectionPool::ConnectionPool(ConnectFn connect, bool single_address)
    : connect_(std::move(connect)), single_address_(single_address) {}

ConnectionPool::ConnectionPool(const Endpoint& endpoint, int first_index)
    : ConnectionPool(
          [endpoint, first_index](int index) {
            // No health checking here: a pool connection carries only RPCs that continue
            // a call the caller's own channel began (whose health check gates new
            // calls), and a server that starts draining (NOT_SERVING) still serves those.
            return ConnectChannel(endpoint, first_index + index,
                                  {{GRPC_ARG_INHIBIT_HEALTH_CHECKING, 1}});
          },
          SingleAddressTarget(endpoint.target)) {}

std::shared_ptr<grpc::ChannelInterface> ConnectionPool::Channel(int index) {
  absl::MutexLock lock(&mu_);
  while (static_cast<int>(channels_.size()) <= index) {
    channels_.push_back(connect_(static_cast<int>(channels_.size())));
  }
  return channels_[static_cast<size_t>(index)];
}

}  // namespace gemmd
