#include "client/generic_stream.h"

#include <grpcpp/support/slice.h>

#include <utility>
#include <vector>

#include "absl/time/clock.h"

namespace gemmd {

GenericStream::GenericStream(std::shared_ptr<grpc::ChannelInterface> channel,
                             const std::string& method, absl::Duration timeout,
                             const std::string& continues)
    : channel_(std::move(channel)) {
  context_.emplace();
  context_->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  if (!continues.empty()) context_->AddMetadata(kContinuesMetadata, continues);
  grpc::GenericStub stub(channel_);
  call_ = stub.PrepareCall(&*context_, method, &queue_);
  if (call_ != nullptr) {
    call_->StartCall(this);
    started_ = Await(this);
  }
}

GenericStream::~GenericStream() {
  if (call_ != nullptr && !finished_) {
    context_->TryCancel();
    Finish().IgnoreError();
  }
  call_.reset();
  // The call itself goes with its context: until then gRPC may keep written messages for a
  // retry, and with them the payload slices this waits for below (a PutTensor refused at
  // its headers hung here that way).
  context_.reset();
  queue_.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (queue_.Next(&tag, &ok)) {
  }
  // The caller frees its tensor once this returns: gRPC must be done reading it.
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* held) { return *held == 0; }, &payloads_held_));
}

bool GenericStream::Await(void* tag) {
  void* got = nullptr;
  bool ok = false;
  // One operation is outstanding at a time, so the next event is this one's.
  if (!queue_.Next(&got, &ok)) return false;
  return ok && got == tag;
}

void GenericStream::ReleasePayload(void* stream) {
  GenericStream* self = static_cast<GenericStream*>(stream);
  absl::MutexLock lock(&self->mu_);
  --self->payloads_held_;
}

bool GenericStream::Write(const wire::EncodedMessage& message) {
  if (!started_ || finished_) return false;
  std::vector<grpc::Slice> slices;
  slices.reserve(message.pieces().size());
  for (const wire::EncodedMessage::Piece& piece : message.pieces()) {
    if (!piece.is_payload) {
      slices.emplace_back(piece.owned);  // tags, lengths, the header: copied
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      ++payloads_held_;
    }
    // gRPC only reads through it; the release callback says when it has finished.
    slices.emplace_back(const_cast<char*>(piece.payload.data()), piece.payload.size(),
                        &GenericStream::ReleasePayload, this);
  }
  grpc::ByteBuffer buffer(slices.data(), slices.size());
  slices.clear();
  call_->Write(buffer, this);
  return Await(this);
}

bool GenericStream::WritesDone() {
  if (!started_ || finished_) return false;
  call_->WritesDone(this);
  return Await(this);
}

bool GenericStream::Read(grpc::ByteBuffer* message) {
  if (!started_ || finished_) return false;
  call_->Read(message, this);
  return Await(this);
}

absl::Status GenericStream::Finish() {
  if (call_ == nullptr) return absl::InternalError("gRPC could not start the call");
  if (finished_) return absl::FailedPreconditionError("the stream is already finished");
  finished_ = true;
  grpc::Status status;
  call_->Finish(&status, this);
  if (!Await(this) && status.ok()) {
    return absl::InternalError("the call ended without a status");
  }
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

bool DumpMessage(grpc::ByteBuffer* buffer, std::vector<grpc::Slice>* slices,
                 wire::ByteRuns* runs) {
  if (!buffer->Dump(slices).ok()) return false;
  for (const grpc::Slice& s : *slices) {
    runs->Append(absl::string_view(reinterpret_cast<const char*>(s.begin()), s.size()));
  }
  return true;
}

}  // namespace gemmd
