#include "server/rpc/gemm_request.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/wire/gemm_wire.h"
#include "server/rpc/payload_placement.h"
#include "server/rpc/quantized_validation.h"

namespace gemmd {
namespace {

// The received slices go once no payload points into them.
void KeepWireOnlyIf(bool needed, GemmRequest* r) {
  if (needed) return;
  r->wire.clear();
  r->wire_reservation = Reservation();
}

// The device reads resident operands where they are: a backend whose resident memory is
// host memory takes them as host operands (as validated); otherwise they move to
// Job::resident. Jobs against one resident B may share launches (shared_b), on the
// device that holds the tensors.
absl::Status PinToDevice(GemmRequest* r) {
  absl::StatusOr<int> device = r->refs.Device();
  if (!device.ok()) return device.status();
  r->device = *device;
  if (r->refs.b != nullptr) r->shared_b = r->refs.b->memory;
  return absl::OkStatus();
}

absl::Status PlaceResident(const GemmRequestContext& context, GemmRequest* r) {
  if (absl::Status s = PinToDevice(r); !s.ok()) return s;
  if (context.resident_in_host_memory) return absl::OkStatus();
  if (r->refs.a != nullptr) std::swap(r->resident.a, r->operands.a);
  if (r->refs.b != nullptr) std::swap(r->resident.b, r->operands.b);
  if (r->refs.c != nullptr) std::swap(r->resident.c_in, r->operands.c_in);
  return absl::OkStatus();
}

// The packed operands of a QuantizedMatmul that are resident, for a device that reads
// them in its own memory.
void PlaceResidentQuantized(const GemmRequestContext& context, GemmRequest* r) {
  if (context.resident_in_host_memory) return;
  const QuantizedOperands& q = r->packed;
  if (r->refs.a != nullptr) {
    r->resident.a = q.a ? q.a->data.data() : q.a_dense.data();
    if (q.a) r->resident.a_scales = q.a->scales.data();
  }
  if (r->refs.b != nullptr) {
    r->resident.b = q.b.data.data();
    r->resident.b_scales = q.b.scales.data();
  }
}

// C written into a new resident tensor instead of the response (keep_c).
absl::Status KeepResult(const GemmRequestContext& context, const gemm::v1::ResidentResult& keep,
                        DataType c_type, GemmRequest* r) {
  if (context.store == nullptr) {
    return absl::FailedPreconditionError(
        "keep_c is set but this server keeps no resident tensors (--tensor_store_bytes=0)");
  }
  TensorSpec spec;
  spec.shape = r->output_shape;
  spec.dtype = c_type;
  absl::StatusOr<std::shared_ptr<StoredTensor>> kept = context.store->Allocate(
      spec, r->device, absl::Seconds(keep.ttl_s()), keep.label(), r->tenant);
  if (!kept.ok()) {
    return absl::Status(kept.status().code(), absl::StrCat("keep_c: ", kept.status().message()));
  }
  r->kept_c = *std::move(kept);
  r->device = r->kept_c->device_index;
  if (context.resident_in_host_memory) {
    r->operands.c_out = r->kept_c->memory;
  } else {
    r->resident.c_out = r->kept_c->memory;
  }
  r->output_bytes = 0;  // nothing goes back in the response
  return absl::OkStatus();
}


absl::Status PrepareMatmul(const GemmRequestContext& context, const wire::ByteRuns& received,
                           GemmRequest* r, PrecisionLabel* label) {
  wire::MatmulRequestWire parsed;
  if (absl::Status s = wire::ParseMatmulRequest(received, &parsed); !s.ok()) return s;
  MatmulResidency residency;
  if (absl::Status s = ResolveMatmulRefs(context.store, r->tenant, &parsed.head, &r->refs, &residency);
      !s.ok()) {
    return s;
  }
  MatmulPayloads payloads;
  const absl::Time place_start = absl::Now();
  absl::StatusOr<PlacedPayloads> placed =
      PlacePayloads(context.memory, context.copier,
                    {{&parsed.a_data, &payloads.a, &r->pieces.a},
                     {&parsed.b_data, &payloads.b, &r->pieces.b},
                     {&parsed.c_data, &payloads.c, &r->pieces.c_in}},
                    context.device_gathers_pieces);
  if (!placed.ok()) return placed.status();
  r->payloads = std::move(placed->buffer);
  KeepWireOnlyIf(placed->uses_wire, r);
  r->prepare = absl::Now() - place_start;  // the copy off the wire is copy-in
  if (r->refs.a != nullptr) payloads.a = DataOf(*r->refs.a);
  if (r->refs.b != nullptr) payloads.b = DataOf(*r->refs.b);
  if (r->refs.c != nullptr) payloads.c = DataOf(*r->refs.c);
  absl::StatusOr<ValidatedMatmul> v =
      ValidateMatmul(parsed.head, payloads, context.limits, residency);
  if (!v.ok()) return v.status();
  *label = PrecisionLabel::Of(v->problem.precision);
  absl::StatusOr<KernelChoice> choice = context.catalogue->Choose(v->problem, nullptr, v->kernel);
  if (!choice.ok()) return choice.status();
  r->kernel = choice->kernel;
  r->kernel_forced = !v->kernel.empty();
  r->problem = v->problem;
  r->operands = v->operands;  // point at the payloads, which the request owns
  r->output_shape = std::move(v->output_shape);
  // Bytes received: the inline operands (a resident C counts only when it is read).
  r->input_bytes = v->input_bytes - r->refs.Bytes() +
                   (r->refs.c != nullptr && v->problem.beta == 0.0f ? DataBytes(r->refs.c->spec) : 0);
  r->output_bytes = v->output_bytes;
  if (absl::Status s = PlaceResident(context, r); !s.ok()) return s;
  if (parsed.head.has_keep_c()) {
    return KeepResult(context, parsed.head.keep_c(), r->problem.c_type, r);
  }
  return absl::OkStatus();
}

absl::Status PrepareQuantizedMatmul(const GemmRequestContext& context,
                                    const wire::ByteRuns& received, GemmRequest* r,
                                    PrecisionLabel* label) {
  wire::QuantizedMatmulRequestWire parsed;
  if (absl::Status s = wire::ParseQuantizedMatmulRequest(received, &parsed); !s.ok()) return s;
  if (absl::Status s = ResolveQuantizedRefs(context.store, r->tenant, &parsed.head, &r->refs); !s.ok()) {
    return s;
  }
  const gemm::v1::QuantizedMatmulRequest& message = parsed.head;
  wire::QuantizedPayloads payloads;
  const absl::Time place_start = absl::Now();
  absl::StatusOr<PlacedPayloads> placed =
      PlacePayloads(context.memory, context.copier, {{&parsed.a_data, &payloads.a_data},
                                     {&parsed.a_scales, &payloads.a_scales},
                                     {&parsed.a_dense_data, &payloads.a_dense_data},
                                     {&parsed.b_data, &payloads.b_data},
                                     {&parsed.b_scales, &payloads.b_scales}});
  if (!placed.ok()) return placed.status();
  r->payloads = std::move(placed->buffer);
  KeepWireOnlyIf(placed->uses_wire, r);
  r->prepare = absl::Now() - place_start;
  const bool a_quantized_ref = r->refs.a != nullptr && r->refs.a->spec.quantized;
  if (r->refs.a != nullptr) {
    (a_quantized_ref ? payloads.a_data : payloads.a_dense_data) = DataOf(*r->refs.a);
    if (a_quantized_ref) payloads.a_scales = ScalesOf(*r->refs.a);
  }
  if (r->refs.b != nullptr) {
    payloads.b_data = DataOf(*r->refs.b);
    payloads.b_scales = ScalesOf(*r->refs.b);
  }
  absl::StatusOr<ValidatedQuantized> v = ValidateQuantizedMatmul(
      message, payloads, context.limits, {a_quantized_ref, r->refs.b != nullptr});
  if (!v.ok()) return v.status();
  *label = PrecisionLabel::Of(v->b_format);
  // The FP32 equivalent, C = A * B^T with B stored [N, K]: what placement (FLOPs) and the
  // host path use.
  r->problem.m = v->m;
  r->problem.n = v->n;
  r->problem.k = v->k;
  r->problem.transpose_b = true;
  r->problem.precision = Precision::kFp32;
  r->output_shape = {v->m, v->n};
  r->input_bytes = v->input_bytes - r->refs.Bytes();
  r->output_bytes = v->output_bytes;
  r->kernel_forced = !v->kernel.empty();
  // A backend with quantized kernels takes the packed bytes as they are (unless the
  // request forces a dense kernel); validation has checked every scale byte already.
  r->packed = PackedOperands(message, *v, payloads);
  absl::StatusOr<KernelChoice> choice =
      context.catalogue->Choose(r->problem, &r->packed, v->kernel);
  if (!choice.ok()) return choice.status();
  r->kernel = choice->kernel;
  if (absl::Status s = PinToDevice(r); !s.ok()) return s;
  if (message.has_keep_c()) {
    if (absl::Status s = KeepResult(context, message.keep_c(), DataType::kFloat32, r); !s.ok()) {
      return s;
    }
  }
  if (choice->path == KernelPath::kPacked) {
    r->quantized = &r->packed;
    PlaceResidentQuantized(context, r);
    return absl::OkStatus();
  }
  const bool dequantize_a = choice->path == KernelPath::kDenseA;
  // The host path reads the operands on the host: a tensor in device memory cannot go.
  const bool host_reads_resident =
      dequantize_a ? r->refs.a != nullptr : r->refs.a != nullptr || r->refs.b != nullptr;
  if (!context.resident_in_host_memory && host_reads_resident) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no quantized kernel here takes these operands on the device (",
        dequantize_a ? "A would be dequantized on the host"
                     : "they would be dequantized on the host",
        "), and resident tensors in device memory are not read on the host; send them inline"));
  }
  // Otherwise dequantize on the host: A alone for a kernel that reads A dense (at most
  // 64 rows), or both operands to FP32 for the FP32 GEMM. Either way the memory is
  // reserved first.
  const int64_t floats = (v->m + (dequantize_a ? 0 : v->n)) * v->k;
  absl::StatusOr<Reservation> reserved = context.memory->Reserve(floats * 4);
  if (!reserved.ok()) return reserved.status();
  r->scratch_reservation = *std::move(reserved);
  // No zero-fill: dequantizing writes every element.
  const absl::Time prepare_start = absl::Now();
  r->scratch.reset(new float[static_cast<size_t>(floats)]);
  float* a = r->scratch.get();
  if (dequantize_a) {
    if (absl::Status s = DequantizeOperand(*r->packed.a, v->m, v->k, a); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("a: ", s.message()));
    }
    r->packed.a.reset();
    r->packed.a_dense_type = DataType::kFloat32;
    r->packed.a_dense = absl::string_view(reinterpret_cast<const char*>(a),
                                          static_cast<size_t>(v->m * v->k) * sizeof(float));
    r->quantized = &r->packed;
    PlaceResidentQuantized(context, r);
  } else {
    float* b = a + v->m * v->k;
    if (absl::Status s = DequantizeOperands(message, *v, payloads, a, b); !s.ok()) return s;
    r->operands = {a, b, nullptr, r->operands.c_out};  // c_out: a kept C, or set later
  }
  r->prepare += absl::Now() - prepare_start;
  return absl::OkStatus();
}

}  // namespace

absl::Status PrepareRequest(const GemmRequestContext& context, RpcMethod method,
                            grpc::ByteBuffer* received, GemmRequest* r, PrecisionLabel* label) {
  const int64_t wire_bytes = static_cast<int64_t>(received->Length());
  if (wire_bytes > context.limits.max_message_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the request is ", wire_bytes, " bytes; this server accepts at most ",
        context.limits.max_message_bytes, " (--max_message_bytes)"));
  }
  absl::StatusOr<Reservation> reserved = context.memory->Reserve(wire_bytes);
  if (!reserved.ok()) return reserved.status();
  r->wire_reservation = *std::move(reserved);
  // Dump takes references to gRPC's slices; no byte is copied.
  if (grpc::Status s = received->Dump(&r->wire); !s.ok()) {
    return absl::InternalError(absl::StrCat("reading the received request: ", s.error_message()));
  }
  received->Clear();
  wire::ByteRuns runs;
  for (const grpc::Slice& slice : r->wire) {
    runs.Append(absl::string_view(reinterpret_cast<const char*>(slice.begin()), slice.size()));
  }
  return method == RpcMethod::kMatmul ? PrepareMatmul(context, runs, r, label)
                                      : PrepareQuantizedMatmul(context, runs, r, label);
}

}  // namespace gemmd
