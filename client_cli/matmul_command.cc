#include <grpcpp/client_context.h>

#include <cstdio>

#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/connection_pool.h"
#include "client/gemm_client.h"
#include "client/tensor_store_client.h"
#include "client_cli/commands.h"
#include "client_cli/matmul_inputs.h"
#include "client_cli/request_args.h"
#include "client_cli/resident_operands.h"
#include "client_cli/shm_operands.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "kernels/npy_io.h"
#include "proto/proto_types.h"

namespace gemmd {

int RunMatmul(const CliOptions& o) {
  std::shared_ptr<grpc::Channel> channel = ConnectChannel(o.server());
  if (int rc = Preflight(o, /*quantized=*/false, channel.get()); rc != 0) return rc;
  // Connections 1.. for striped calls and parallel downloads, kept for the command.
  auto pool = std::make_shared<ConnectionPool>(o.server(), 1);
  TensorStoreClient store(channel, pool);
  ServerResidentLookup resident(&store, absl::Seconds(o.timeout_s));
  absl::StatusOr<std::unique_ptr<MatmulInputs>> inputs = BuildMatmulInputs(o, &resident);
  if (!inputs.ok()) return ReportError(inputs.status());
  const MatmulInputs& in = **inputs;
  GemmClient client(channel, pool);
  CallOptions options;
  options.timeout = absl::Seconds(o.timeout_s);
  options.stripes = o.stripes;
  options.row_blocks = o.row_blocks;
  options.stripe_chunk_bytes = o.chunk_bytes();
  MatmulArgs args = ArgsOf(in.request);
  std::unique_ptr<ShmOperands> shm;
  if (o.shm) {
    const int64_t c_bytes = in.problem.batch * in.problem.m * in.problem.n *
                            static_cast<int64_t>(DataTypeSize(in.problem.c_type));
    absl::StatusOr<std::unique_ptr<ShmOperands>> made = ShmOperands::Create(
        channel, o.shm_key,
        {args.a_ref.empty() ? args.a.data : absl::string_view(),
         args.b_ref.empty() ? args.b.data : absl::string_view(),
         args.c && args.c_ref.empty() ? args.c->data : absl::string_view()},
        /*c_slots=*/1, c_bytes);
    if (!made.ok()) return ReportRpcError("--shm: the shared-memory region", made.status());
    shm = *std::move(made);
    args.a.shm = shm->Payload(0);
    args.b.shm = shm->Payload(1);
    if (args.c) args.c->shm = shm->Payload(2);
    if (!args.keep_c) args.c_shm = shm->CSlot(0);
  }
  const int stripes = client.StripesFor(args, options);
  MatmulResult result;
  const absl::Time start = absl::Now();
  const absl::Status status = client.Matmul(args, options, &result);
  const absl::Duration elapsed = absl::Now() - start;
  if (!status.ok()) return ReportRpcError("Matmul", status);
  const gemm::v1::MatmulResponse& response = result.info();
  const std::string& c_ref = response.c_ref().handle();
  // C kept on the server (--keep_c) comes back only if --out or --verify needs it.
  std::string kept_c;
  if (!c_ref.empty() && (!o.out_path.empty() || o.verify)) {
    absl::StatusOr<DownloadedTensor> c = store.GetTensor(c_ref, absl::Seconds(o.timeout_s));
    if (!c.ok()) return ReportRpcError("GetTensor (the kept C)", c.status());
    kept_c = std::move(c->data);
  }
  const absl::string_view c_bytes = !c_ref.empty()     ? absl::string_view(kept_c)
                                    : args.c_shm.set() ? shm->C(0)
                                                       : result.c();

  const gemm::v1::Timing& t = response.timing();
  std::printf("c: shape=[%s] dtype=%s precision=%s\n",
              absl::StrJoin(response.c().shape(), ",").c_str(),
              ProtoDataTypeName(response.c().dtype()).c_str(),
              ProtoPrecisionName(response.precision()).c_str());
  std::printf("kernel=%s device=%s\n", response.kernel().c_str(), response.device().c_str());
  std::printf(
      "server_us: queue=%lld copy_in=%lld compute=%lld copy_out=%lld total=%lld batch_size=%u\n",
      static_cast<long long>(t.queue_us()), static_cast<long long>(t.copy_in_us()),
      static_cast<long long>(t.compute_us()), static_cast<long long>(t.copy_out_us()),
      static_cast<long long>(t.total_us()), t.batch_size());
  const double seconds = absl::ToDoubleSeconds(elapsed);
  std::printf(
      "client: %.3f ms round trip, %.2f GFLOP/s end to end, %.1f MB sent, %.1f MB received, "
      "over %s\n",
      seconds * 1e3, in.problem.Flops() / seconds / 1e9, shm ? 0.0 : in.payload_bytes / 1e6,
      result.c().size() / 1e6,
      shm ? "shared memory"
          : absl::StrCat(stripes, " connection", stripes == 1 ? "" : "s").c_str());
  if (!c_ref.empty()) std::printf("c_ref=%s\n", c_ref.c_str());

  if (!o.out_path.empty()) {
    const std::optional<DataType> type = DataTypeFromProto(response.c().dtype());
    if (!type || *type == DataType::kBFloat16) {
      std::fprintf(stderr, "error: --out: .npy output supports float32 and float16, not %s\n",
                   ProtoDataTypeName(response.c().dtype()).c_str());
      return 1;
    }
    NpyArray out;
    out.shape.assign(response.c().shape().begin(), response.c().shape().end());
    out.type = *type;
    out.data = std::string(c_bytes);
    if (absl::Status s = WriteNpyFile(o.out_path, out); !s.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    std::printf("wrote %s\n", o.out_path.c_str());
  }

  if (o.verify) {
    absl::StatusOr<double> error = VerifyResult(in, response, c_bytes);
    if (!error.ok()) {
      std::fprintf(stderr, "error: verify: %s\n", std::string(error.status().message()).c_str());
      return 1;
    }
    const double tolerance = ToleranceFor(in.problem);
    const bool pass = *error <= tolerance;
    std::printf("rel_error=%.3e (vs FP64 reference; tolerance %.0e for %s) %s\n", *error, tolerance,
                PrecisionName(in.problem.precision), pass ? "PASS" : "FAIL");
    if (!pass) return 3;
  }
  return 0;
}

}  // namespace gemmd
