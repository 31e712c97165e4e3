// gemm-cli quantized: quantizes on the client, calls QuantizedMatmul, and reports the
// bytes saved against sending FP32 (and FP16), the kernel error (against the
// dequantized operands) and the format error (against the FP32 originals).
#include <grpcpp/client_context.h>

#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/connection_pool.h"
#include "client/gemm_client.h"
#include "client/tensor_store_client.h"
#include "client_cli/commands.h"
#include "client_cli/request_args.h"
#include "client_cli/quantized_inputs.h"
#include "client_cli/resident_operands.h"
#include "client_cli/shm_operands.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "kernels/npy_io.h"
#include "proto/proto_types.h"

namespace gemmd {

int RunQuantized(const CliOptions& o) {
  std::shared_ptr<grpc::Channel> channel = ConnectChannel(o.server());
  if (int rc = Preflight(o, /*quantized=*/true, channel.get()); rc != 0) return rc;
  auto pool = std::make_shared<ConnectionPool>(o.server(), 1);
  TensorStoreClient store(channel, pool);
  ServerResidentLookup resident(&store, absl::Seconds(o.timeout_s));
  absl::StatusOr<std::unique_ptr<QuantizedInputs>> built = BuildQuantizedInputs(o, &resident);
  if (!built.ok()) return ReportError(built.status());
  const QuantizedInputs& in = **built;
  GemmClient client(channel, pool);
  CallOptions options;
  options.timeout = absl::Seconds(o.timeout_s);
  options.stripes = o.stripes;
  options.stripe_chunk_bytes = o.chunk_bytes();
  QuantizedMatmulArgs args = ArgsOf(in.request);
  std::unique_ptr<ShmOperands> shm;
  if (o.shm) {
    // The inline payloads in a region: A's data and scales (or the dense A), B's.
    const absl::string_view none;
    absl::StatusOr<std::unique_ptr<ShmOperands>> made = ShmOperands::Create(
        channel, o.shm_key,
        {args.a ? args.a->data : none, args.a ? args.a->scales : none,
         args.a_dense ? args.a_dense->data : none, args.b_ref.empty() ? args.b.data : none,
         args.b_ref.empty() ? args.b.scales : none},
        /*c_slots=*/1, in.m * in.n * 4);
    if (!made.ok()) return ReportRpcError("--shm: the shared-memory region", made.status());
    shm = *std::move(made);
    if (args.a) {
      args.a->data_shm = shm->Payload(0);
      args.a->scales_shm = shm->Payload(1);
    }
    if (args.a_dense) args.a_dense->shm = shm->Payload(2);
    args.b.data_shm = shm->Payload(3);
    args.b.scales_shm = shm->Payload(4);
    args.c_shm = shm->CSlot(0);
  }
  const int stripes = client.StripesFor(args, options);
  MatmulResult result;
  const absl::Time start = absl::Now();
  const absl::Status status = client.QuantizedMatmul(args, options, &result);
  const absl::Duration elapsed = absl::Now() - start;
  if (!status.ok()) return ReportRpcError("QuantizedMatmul", status);
  const gemm::v1::MatmulResponse& response = result.info();
  const absl::string_view c_bytes = shm ? shm->C(0) : result.c();

  const int64_t fp32_bytes = (in.m + in.n) * in.k * 4;
  const int64_t b_bytes = in.b_bytes;
  std::printf("c: shape=[%s] dtype=%s  format=%s%s\n",
              absl::StrJoin(response.c().shape(), ",").c_str(),
              ProtoDataTypeName(response.c().dtype()).c_str(), QuantFormatName(in.format),
              in.weight_only ? " (weight only)" : "");
  std::printf("kernel=%s device=%s\n", response.kernel().c_str(), response.device().c_str());
  const gemm::v1::Timing& t = response.timing();
  std::printf("server_us: queue=%lld copy_in=%lld compute=%lld copy_out=%lld total=%lld\n",
              static_cast<long long>(t.queue_us()), static_cast<long long>(t.copy_in_us()),
              static_cast<long long>(t.compute_us()), static_cast<long long>(t.copy_out_us()),
              static_cast<long long>(t.total_us()));
  std::printf(
      "bytes sent: %lld operands (B %s) vs %lld as FP32 (%.2fx fewer), %lld as FP16; "
      "%.3f ms round trip over %s\n",
      static_cast<long long>(in.sent_bytes),
      in.request.has_b_ref() ? "resident" : std::to_string(b_bytes).c_str(),
      static_cast<long long>(fp32_bytes),
      static_cast<double>(fp32_bytes) / static_cast<double>(in.sent_bytes),
      static_cast<long long>(fp32_bytes / 2), absl::ToDoubleMilliseconds(elapsed),
      shm ? "shared memory"
          : absl::StrCat(stripes, " connection", stripes == 1 ? "" : "s").c_str());
  std::printf("B [%lld, %lld]: %lld bytes %s vs %lld FP32, %lld FP16%s\n",
              static_cast<long long>(in.n), static_cast<long long>(in.k),
              static_cast<long long>(b_bytes), QuantFormatName(in.format),
              static_cast<long long>(in.n * in.k * 4), static_cast<long long>(in.n * in.k * 2),
              in.request.has_b_ref() ? " (resident: not sent)" : "");

  if (!o.out_path.empty()) {
    NpyArray c;
    c.shape = {in.m, in.n};
    c.type = DataType::kFloat32;
    c.data = std::string(c_bytes);
    if (absl::Status s = WriteNpyFile(o.out_path, c); !s.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  if (o.verify) {
    absl::StatusOr<QuantizedErrors> e = QuantizedResultErrors(in, c_bytes);
    if (!e.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(e.status().message()).c_str());
      return 1;
    }
    const bool pass = e->kernel <= kQuantizedKernelTolerance;
    std::printf("kernel_error=%.3e (vs FP64 on the dequantized operands; tolerance %.0e) %s\n",
                e->kernel, kQuantizedKernelTolerance, pass ? "PASS" : "FAIL");
    if (e->has_format) {
      std::printf("format_error=%.3e (vs FP64 on the FP32 originals: what %s costs)\n",
                  e->format, QuantFormatName(in.format));
    } else {
      std::printf("format_error: not measured (a resident operand's FP32 original is not here)\n");
    }
    if (!pass) return 3;
  }
  return 0;
}

}  // namespace gemmd
