#include "server/rpc/call_continuation.h"

#include "absl/strings/string_view.h"

namespace gemmd {

bool ContinuesACall(const grpc::ServerContextBase& context, TensorStore* store,
                    const std::string& tenant) {
  if (store == nullptr) return false;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kContinuesMetadata);
  if (it == metadata.end()) return false;
  return store->IsTemporary(absl::string_view(it->second.data(), it->second.size()), tenant);
}

}  // namespace gemmd
