// Ends uploads that have sent nothing for a while (--upload_idle_timeout_s). An upload
// holds its tensor's room in the store from its header on (device memory on a GPU), so
// a stream that sends a header and then nothing would hold that room for as long as its
// connection lives; gRPC has no read timeout to stop it.
//
// One thread looks every quarter of the timeout (at most every second) and ends each
// upload whose last chunk came longer ago than the timeout, once: it takes a reference
// first, so an upload that finishes meanwhile stays valid until EndIdle returns.
// Thread-safe.
#ifndef GEMMD_SERVER_RPC_UPLOAD_WATCH_H_
#define GEMMD_SERVER_RPC_UPLOAD_WATCH_H_

#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gemmd {

class UploadWatch {
 public:
  // What the watch sees of an upload.
  class Upload {
   public:
    virtual absl::Time last_activity() const = 0;
    // Ends the upload for being idle `idle`; called at most once, on the watch's thread,
    // between a Ref() and an Unref().
    virtual void EndIdle(absl::Duration idle) = 0;
    virtual void Ref() = 0;
    virtual void Unref() = 0;

   protected:
    ~Upload() = default;
  };

  // `timeout` zero: uploads are never ended for being idle (and no thread runs).
  explicit UploadWatch(absl::Duration timeout);
  ~UploadWatch();
  UploadWatch(const UploadWatch&) = delete;
  UploadWatch& operator=(const UploadWatch&) = delete;

  absl::Duration timeout() const { return timeout_; }
  void Add(Upload* upload);
  // After Remove the watch takes no new reference to `upload` (one it took before stays
  // until its EndIdle returns).
  void Remove(Upload* upload);

 private:
  void Loop();

  const absl::Duration timeout_;
  absl::Mutex mu_;
  absl::flat_hash_set<Upload*> uploads_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_UPLOAD_WATCH_H_
