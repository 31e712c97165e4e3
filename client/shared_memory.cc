#include "client/shared_memory.h"

#include <fcntl.h>
#include <grpcpp/client_context.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "gemm/v1/gemm.grpc.pb.h"

namespace gemmd {
namespace {

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

absl::Status Errno(absl::string_view what, const std::string& key) {
  const int error = errno;
  const std::string message = absl::StrCat(what, " ", key, ": ", std::strerror(error));
  if (error == EEXIST) return absl::AlreadyExistsError(message);
  if (error == EACCES || error == EPERM) return absl::PermissionDeniedError(message);
  if (error == ENOMEM || error == ENOSPC) return absl::ResourceExhaustedError(message);
  return absl::InvalidArgumentError(message);
}

}  // namespace

absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> SharedMemoryRegion::Create(
    const std::string& key, int64_t bytes, bool replace, int mode) {
  if (bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("a region needs bytes > 0, not ", bytes));
  }
  if (replace) shm_unlink(key.c_str());
  const int fd = shm_open(key.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC,
                          static_cast<mode_t>(mode));
  if (fd < 0) return Errno("creating", key);
  // fchmod: the mode as given, not narrowed by the umask.
  if (fchmod(fd, static_cast<mode_t>(mode)) != 0 || ftruncate(fd, bytes) != 0) {
    absl::Status s = Errno("sizing", key);
    close(fd);
    shm_unlink(key.c_str());
    return s;
  }
  void* data = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (data == MAP_FAILED) {
    absl::Status s = Errno("mapping", key);
    shm_unlink(key.c_str());
    return s;
  }
  std::unique_ptr<SharedMemoryRegion> region(new SharedMemoryRegion());
  region->key_ = key;
  region->data_ = static_cast<char*>(data);
  region->size_ = bytes;
  return region;
}

SharedMemoryRegion::~SharedMemoryRegion() {
  munmap(data_, static_cast<size_t>(size_));
  shm_unlink(key_.c_str());
}

absl::StatusOr<gemm::v1::RegionInfo> RegionClient::Register(const std::string& name,
                                                            const std::string& key,
                                                            int64_t offset, int64_t bytes) {
  auto stub = gemm::v1::GemmService::NewStub(channel_);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  gemm::v1::RegisterRegionRequest request;
  request.set_name(name);
  request.set_key(key);
  request.set_offset(offset);
  request.set_bytes(bytes);
  gemm::v1::RegionInfo info;
  if (absl::Status s = FromGrpc(stub->RegisterRegion(&context, request, &info)); !s.ok()) return s;
  return info;
}

absl::Status RegionClient::Unregister(const std::string& name) {
  auto stub = gemm::v1::GemmService::NewStub(channel_);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  gemm::v1::UnregisterRegionRequest request;
  request.set_name(name);
  gemm::v1::UnregisterRegionResponse response;
  return FromGrpc(stub->UnregisterRegion(&context, request, &response));
}

absl::StatusOr<std::string> RegionClient::Prefix() {
  auto stub = gemm::v1::GemmService::NewStub(channel_);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  gemm::v1::ServerInfo info;
  if (absl::Status s =
          FromGrpc(stub->GetServerInfo(&context, gemm::v1::GetServerInfoRequest(), &info));
      !s.ok()) {
    return s;
  }
  if (info.limits().shm_prefix().empty()) {
    return absl::FailedPreconditionError(
        "the server has shared-memory regions off (--shm=off), or predates them");
  }
  return info.limits().shm_prefix();
}

absl::StatusOr<gemm::v1::ListRegionsResponse> RegionClient::List() {
  auto stub = gemm::v1::GemmService::NewStub(channel_);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  gemm::v1::ListRegionsResponse response;
  if (absl::Status s =
          FromGrpc(stub->ListRegions(&context, gemm::v1::ListRegionsRequest(), &response));
      !s.ok()) {
    return s;
  }
  return response;
}

}  // namespace gemmd
