#include "server/rpc/gemm_request.h"

#include <algorithm>
#include <utility>

#include "proto/wire/gemm_wire.h"
#include "server/rpc/quantized_validation.h"
#include "server/rpc/request_phases.h"

namespace gemmd {
namespace {

// The received bytes stay only while a payload is read in place (or in pieces).
void KeepReceivedOnlyIf(bool needed, Received received, GemmRequest* r) {
  if (!needed) return;
  r->received = std::move(received.slices);
  r->received_reservation = std::move(received.reservation);
}

absl::Status PrepareMatmul(const GemmRequestContext& context, Received received, GemmRequest* r,
                           PrecisionLabel* label) {
  wire::MatmulRequestWire located;
  if (absl::Status s = wire::ParseMatmulRequest(received.runs, &located); !s.ok()) return s;
  absl::StatusOr<RegionPayloads> in_regions =
      LocateMatmulRegions(context.regions, r->tenant, &located);
  if (!in_regions.ok()) return in_regions.status();
  absl::StatusOr<Bound> bound = BindMatmul(context.store, r->tenant, &located.head);
  if (!bound.ok()) return bound.status();
  absl::StatusOr<ValidatedMatmul> v = ValidateMatmul(
      located.head, LocatedPayloads(located, bound->refs), context.limits, bound->residency);
  if (!v.ok()) return v.status();
  *label = PrecisionLabel::Of(v->problem.precision);
  absl::StatusOr<KernelChoice> choice = context.catalogue->Choose(v->problem, nullptr, v->kernel);
  if (!choice.ok()) return choice.status();
  if (absl::Status s = CheckResultSlice(*in_regions, v->output_bytes); !s.ok()) return s;
  absl::StatusOr<PlacedMatmul> placed =
      PlaceMatmul(context, located, bound->refs, v->problem, &*in_regions);
  if (!placed.ok()) return placed.status();
  std::shared_ptr<StoredTensor> kept;
  if (located.head.has_keep_c()) {
    absl::StatusOr<std::shared_ptr<StoredTensor>> c =
        AllocateKeptC(context, located.head.keep_c(), v->output_shape, v->problem.c_type,
                      bound->device, r->tenant);
    if (!c.ok()) return c.status();
    kept = *std::move(c);
  }

  // The request from the phases' results, each field set here once.
  const TensorRefs& refs = bound->refs;
  r->problem = v->problem;
  r->kernel = choice->kernel;
  r->kernel_forced = !v->kernel.empty();
  r->operands = placed->host;
  r->pieces = std::move(placed->pieces);
  r->resident = placed->on_device;
  r->copied = std::move(placed->copied);
  KeepReceivedOnlyIf(placed->uses_received, std::move(received), r);
  r->prepare = placed->took;  // the copy off the received bytes is copy-in
  r->shared_b = bound->shared_b;
  r->device = kept != nullptr ? kept->device_index : bound->device;
  r->output_shape = std::move(v->output_shape);
  // Bytes received: the inline operands (a resident C counts only when it is read), not
  // those read from a region.
  r->input_bytes = std::max<int64_t>(
      0, v->input_bytes - refs.Bytes() - in_regions->input_bytes +
             (refs.c != nullptr && v->problem.beta == 0.0f ? DataBytes(refs.c->spec) : 0));
  // A kept C, or one written to a region, is not sent.
  r->output_bytes = kept != nullptr || in_regions->c_out != nullptr ? 0 : v->output_bytes;
  r->kept_c = std::move(kept);
  r->resident_refs = std::move(bound->refs);
  r->regions = std::move(in_regions->regions);
  r->c_region = in_regions->c_out;
  return absl::OkStatus();
}

absl::Status PrepareQuantizedMatmul(const GemmRequestContext& context, Received received,
                                    GemmRequest* r, PrecisionLabel* label) {
  wire::QuantizedMatmulRequestWire located;
  if (absl::Status s = wire::ParseQuantizedMatmulRequest(received.runs, &located); !s.ok()) {
    return s;
  }
  absl::StatusOr<RegionPayloads> in_regions =
      LocateQuantizedRegions(context.regions, r->tenant, &located);
  if (!in_regions.ok()) return in_regions.status();
  const gemm::v1::QuantizedMatmulRequest& head = located.head;
  absl::StatusOr<Bound> bound = BindQuantized(context.store, r->tenant, &located.head);
  if (!bound.ok()) return bound.status();
  const TensorRefs& refs = bound->refs;
  absl::StatusOr<PlacedQuantized> placed = PlaceQuantized(context, located, refs, &*in_regions);
  if (!placed.ok()) return placed.status();
  const bool a_quantized_ref = refs.a != nullptr && refs.a->spec.quantized;
  absl::StatusOr<ValidatedQuantized> v = ValidateQuantizedMatmul(
      head, placed->payloads, context.limits, {a_quantized_ref, refs.b != nullptr});
  if (!v.ok()) return v.status();
  *label = PrecisionLabel::Of(v->b_format);
  if (absl::Status s = CheckResultSlice(*in_regions, v->output_bytes); !s.ok()) return s;
  // The FP32 equivalent, C = A * B^T with B stored [N, K]: what placement (FLOPs) and the
  // host path use.
  GemmProblem problem;
  problem.m = v->m;
  problem.n = v->n;
  problem.k = v->k;
  problem.transpose_b = true;
  problem.precision = Precision::kFp32;
  // A backend with quantized kernels takes the packed bytes as they are (unless the
  // request forces a dense kernel); validation has checked every scale byte already.
  QuantizedOperands packed = PackedOperands(head, *v, placed->payloads);
  // A device reading resident operands in its own memory reads them in the layout the
  // store keeps them in (on the host they were read back canonical).
  if (!context.resident_in_host_memory) {
    if (refs.b != nullptr) packed.b.layout = refs.b->layout;
    if (refs.a != nullptr && packed.a.has_value()) packed.a->layout = refs.a->layout;
  }
  absl::StatusOr<KernelChoice> choice = context.catalogue->Choose(problem, &packed, v->kernel);
  if (!choice.ok()) return choice.status();
  absl::StatusOr<QuantizedInputs> inputs = QuantizedInputsFor(
      context, head, *v, placed->payloads, std::move(packed), refs, choice->path);
  if (!inputs.ok()) return inputs.status();
  std::shared_ptr<StoredTensor> kept;
  if (head.has_keep_c()) {
    absl::StatusOr<std::shared_ptr<StoredTensor>> c = AllocateKeptC(
        context, head.keep_c(), {v->m, v->n}, DataType::kFloat32, bound->device, r->tenant);
    if (!c.ok()) return c.status();
    kept = *std::move(c);
  }

  // The request from the phases' results, each field set here once.
  r->problem = problem;
  r->kernel = choice->kernel;
  r->kernel_forced = !v->kernel.empty();
  r->packed = std::move(inputs->packed);
  r->quantized = choice->path == KernelPath::kHost ? nullptr : &r->packed;
  r->operands = inputs->host;
  r->resident = inputs->on_device;
  r->dequantized = std::move(inputs->dequantized);
  r->dequantized_reservation = std::move(inputs->dequantized_reservation);
  r->copied = std::move(placed->copied);
  r->unpacked = std::move(placed->unpacked);
  KeepReceivedOnlyIf(placed->uses_received, std::move(received), r);
  r->prepare = placed->took + inputs->took;
  r->shared_b = bound->shared_b;
  r->device = kept != nullptr ? kept->device_index : bound->device;
  r->output_shape = {v->m, v->n};
  r->input_bytes = std::max<int64_t>(0, v->input_bytes - refs.Bytes() - in_regions->input_bytes);
  r->output_bytes = kept != nullptr || in_regions->c_out != nullptr ? 0 : v->output_bytes;
  r->kept_c = std::move(kept);
  r->resident_refs = std::move(bound->refs);
  r->regions = std::move(in_regions->regions);
  r->c_region = in_regions->c_out;
  return absl::OkStatus();
}

}  // namespace

absl::Status PrepareRequest(const GemmRequestContext& context, RpcMethod method,
                            grpc::ByteBuffer* bytes, GemmRequest* r, PrecisionLabel* label) {
  absl::StatusOr<Received> received = TakeReceived(context, bytes);
  if (!received.ok()) return received.status();
  return PrepareReceived(context, method, *std::move(received), r, label);
}

absl::Status PrepareReceived(const GemmRequestContext& context, RpcMethod method,
                             Received received, GemmRequest* r, PrecisionLabel* label) {
  return method == RpcMethod::kMatmul ? PrepareMatmul(context, std::move(received), r, label)
                                      : PrepareQuantizedMatmul(context, std::move(received), r, label);
}

void SetResultDestination(const GemmRequestContext& context, void* response,
                          GemmRequest* r) {
  if (r->c_region != nullptr) {
    r->operands.c_out = r->c_region;
  } else if (r->kept_c == nullptr) {
    r->operands.c_out = response;
  } else if (context.resident_in_host_memory) {
    r->operands.c_out = r->kept_c->memory;
  } else {
    r->resident.c_out = r->kept_c->memory;
  }
}

}  // namespace gemmd
