// copy-floor: what the GPU's copies and waits cost by themselves, at the sizes of the
// service benchmarks' small requests, so the server's phases (Timing: queue, copy_in,
// compute, copy_out) can be read against the least the hardware allows in the same run.
//
// Each case is timed on the host (steady clock, from the first enqueue to the return of
// a spinning cudaStreamSynchronize), as the server's lane experiences it, best and median
// of --iters runs after --warmup. Host buffers are page-locked (cudaHostAlloc) unless the
// case says pageable.
//
// Usage: copy-floor [--iters N] [--warmup N] [--batch N] [--device N]
//   --batch: items of the unary case (default 27: a 128^3 FP16 batch at 128 callers,
//   64 KiB of A and B in and 64 KiB of C out each).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

#define CHECK(call)                                                                             \
  do {                                                                                          \
    const cudaError_t e = (call);                                                               \
    if (e != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e)); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

__global__ void Empty() {}

struct Timing {
  double best_us, median_us;
};

Timing Time(int warmup, int iters, const std::function<void()>& body) {
  for (int i = 0; i < warmup; ++i) body();
  std::vector<double> us;
  us.reserve(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    body();
    const auto t1 = std::chrono::steady_clock::now();
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(us.begin(), us.end());
  return {us.front(), us[us.size() / 2]};
}

void Row(const std::string& name, size_t bytes, const Timing& t) {
  const double gbps = bytes > 0 ? static_cast<double>(bytes) / (t.median_us * 1e3) : 0;
  std::printf("| %-52s | %9zu | %8.1f | %8.1f | %6.1f |\n", name.c_str(), bytes, t.best_us,
              t.median_us, gbps);
}

char* Pinned(size_t bytes) {
  void* p = nullptr;
  CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
  std::memset(p, 1, bytes);
  return static_cast<char*>(p);
}

char* Device(size_t bytes) {
  void* p = nullptr;
  CHECK(cudaMalloc(&p, bytes));
  CHECK(cudaMemset(p, 0, bytes));
  return static_cast<char*>(p);
}

// `count` copies of `each` bytes, host block i at host + i * host_stride, device block i at
// device + i * each: one cudaMemcpyAsync each, or (batched) one cudaMemcpyBatchAsync.
void Copies(char* device, char* host, size_t each, size_t host_stride, int count, bool to_device,
            bool batched, cudaStream_t stream) {
  if (!batched) {
    for (int i = 0; i < count; ++i) {
      char* h = host + static_cast<size_t>(i) * host_stride;
      char* d = device + static_cast<size_t>(i) * each;
      CHECK(cudaMemcpyAsync(to_device ? d : h, to_device ? h : d, each,
                            to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, stream));
    }
    return;
  }
  std::vector<void*> dsts(static_cast<size_t>(count));
  std::vector<const void*> srcs(static_cast<size_t>(count));
  std::vector<size_t> sizes(static_cast<size_t>(count), each);
  for (int i = 0; i < count; ++i) {
    char* h = host + static_cast<size_t>(i) * host_stride;
    char* d = device + static_cast<size_t>(i) * each;
    dsts[static_cast<size_t>(i)] = to_device ? d : h;
    srcs[static_cast<size_t>(i)] = to_device ? h : d;
  }
  cudaMemcpyAttributes attributes{};
  attributes.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  size_t attribute_index = 0;
  CHECK(cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), static_cast<size_t>(count),
                             &attributes, &attribute_index, 1, stream));
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 300, warmup = 30, batch = 27, device = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](int* out) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", arg.c_str());
        std::exit(2);
      }
      *out = std::atoi(argv[++i]);
    };
    if (arg == "--iters") {
      value(&iters);
    } else if (arg == "--warmup") {
      value(&warmup);
    } else if (arg == "--batch") {
      value(&batch);
    } else if (arg == "--device") {
      value(&device);
    } else {
      std::fprintf(stderr, "usage: copy-floor [--iters N] [--warmup N] [--batch N] [--device N]\n");
      return arg == "--help" ? 0 : 2;
    }
  }
  if (iters < 1 || warmup < 0 || batch < 1 || batch > 1024) {
    std::fprintf(stderr, "bad --iters, --warmup or --batch\n");
    return 2;
  }
  CHECK(cudaSetDevice(device));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, device));
  std::printf("## copy-floor on %s, batch %d\n", prop.name, batch);
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  constexpr size_t kItem = 64 << 10;  // 128^2 FP32 C, or A and B of 128^3 FP16
  const size_t batch_bytes = kItem * static_cast<size_t>(batch);
  constexpr size_t kResidentIn = 256 << 10, kResidentOut = 512 << 10;  // 16x8192 FP16 / FP32
  const size_t max_bytes = std::max(batch_bytes, kResidentOut);
  char* host = Pinned(2 * max_bytes);  // stride-2 blocks fit too
  char* host_b = Pinned(max_bytes);
  std::vector<char> pageable(max_bytes, 2);
  char* dev = Device(max_bytes);
  char* dev_b = Device(max_bytes);

  auto sync = [&] { CHECK(cudaStreamSynchronize(stream)); };
  auto one = [&](void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    return [=, &sync] {
      CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream));
      sync();
    };
  };

  std::printf("| case | bytes | best us | median us | GB/s |\n|---|---:|---:|---:|---:|\n");
  Row("sync of an idle stream", 0, Time(warmup, iters, sync));
  Row("empty kernel + sync", 0, Time(warmup, iters, [&] {
        Empty<<<1, 32, 0, stream>>>();
        sync();
      }));
  for (size_t bytes : {kItem, kResidentIn, batch_bytes}) {
    Row("H2D one DMA, page-locked", bytes,
        Time(warmup, iters, one(dev, host, bytes, cudaMemcpyHostToDevice)));
  }
  Row("H2D one DMA, pageable", kResidentIn,
      Time(warmup, iters, one(dev, pageable.data(), kResidentIn, cudaMemcpyHostToDevice)));
  for (size_t bytes : {kItem, kResidentOut, batch_bytes}) {
    Row("D2H one DMA, page-locked", bytes,
        Time(warmup, iters, one(host, dev, bytes, cudaMemcpyDeviceToHost)));
  }
  // A batch's operands and results as separate blocks (the pool's 32/64 KiB blocks).
  const int halves = 2 * batch;
  for (bool batched : {false, true}) {
    const std::string how = batched ? "cudaMemcpyBatchAsync" : "one DMA each";
    Row("H2D " + std::to_string(halves) + " x 32 KiB, " + how, batch_bytes,
        Time(warmup, iters, [&] {
          Copies(dev, host, kItem / 2, kItem, halves, true, batched, stream);
          sync();
        }));
    Row("D2H " + std::to_string(batch) + " x 64 KiB, " + how, batch_bytes, Time(warmup, iters, [&] {
          Copies(dev, host, kItem, 2 * kItem, batch, false, batched, stream);
          sync();
        }));
  }
  // The host side of a gather: pageable pieces into page-locked staging, one thread.
  Row("host memcpy pageable -> page-locked, 1 thread", batch_bytes,
      Time(warmup, iters, [&] { std::memcpy(host_b, pageable.data(), batch_bytes); }));
  Row("host memcpy pageable -> page-locked, 1 thread", kResidentIn,
      Time(warmup, iters, [&] { std::memcpy(host_b, pageable.data(), kResidentIn); }));
  // A whole launch's device work with nothing computed: what a lane cannot go below.
  Row("unary batch: H2D + empty kernel + D2H", 2 * batch_bytes, Time(warmup, iters, [&] {
        CHECK(cudaMemcpyAsync(dev, host, batch_bytes, cudaMemcpyHostToDevice, stream));
        Empty<<<1, 32, 0, stream>>>();
        CHECK(cudaMemcpyAsync(host_b, dev_b, batch_bytes, cudaMemcpyDeviceToHost, stream));
        sync();
      }));
  Row("resident: H2D 256 KiB + empty kernel + D2H 512 KiB", kResidentIn + kResidentOut,
      Time(warmup, iters, [&] {
        CHECK(cudaMemcpyAsync(dev, host, kResidentIn, cudaMemcpyHostToDevice, stream));
        Empty<<<1, 32, 0, stream>>>();
        CHECK(cudaMemcpyAsync(host_b, dev_b, kResidentOut, cudaMemcpyDeviceToHost, stream));
        sync();
      }));
  // The server's own clock for its copy-in (CudaDevice::Execute): events around the copy
  // on the GPU, from the first event's record to the second's.
  {
    cudaEvent_t start, copied;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&copied));
    for (size_t bytes : {kResidentIn, batch_bytes}) {
      std::vector<float> ms;
      for (int i = 0; i < warmup + iters; ++i) {
        CHECK(cudaEventRecord(start, stream));
        cudaPointerAttributes attributes{};
        CHECK(cudaPointerGetAttributes(&attributes, host));
        CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream));
        CHECK(cudaEventRecord(copied, stream));
        Empty<<<1, 32, 0, stream>>>();
        sync();
        float t = 0;
        CHECK(cudaEventElapsedTime(&t, start, copied));
        if (i >= warmup) ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      Row("H2D event-timed as the server's copy_in", bytes,
          {1e3 * ms.front(), 1e3 * ms[ms.size() / 2]});
    }
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(copied));
  }
  CHECK(cudaFree(dev));
  CHECK(cudaFree(dev_b));
  CHECK(cudaFreeHost(host));
  CHECK(cudaFreeHost(host_b));
  CHECK(cudaStreamDestroy(stream));
  return 0;
}
