#include "server/rpc/request_phases.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/rpc/payload_placement.h"
#include "server/store/canonical_read.h"

namespace gemmd {
namespace {

absl::StatusOr<Bound> Bind(const TensorRefs& refs) {
  Bound bound;
  absl::StatusOr<int> device = refs.Device();
  if (!device.ok()) return device.status();
  bound.device = *device;
  if (refs.b != nullptr) bound.shared_b = refs.b->memory;
  return bound;
}

bool InRegion(const RegionPayloads* regions, const wire::ByteRuns& runs) {
  return regions != nullptr && regions->InRegion(&runs);
}

// The resident packed operands, for a device that reads them in its own memory.
DeviceOperands ResidentPacked(const GemmRequestContext& context, const QuantizedOperands& q,
                              const TensorRefs& refs) {
  DeviceOperands on_device;
  if (context.resident_in_host_memory) return on_device;
  if (refs.a != nullptr) {
    on_device.a = q.a ? q.a->data.data() : q.a_dense.data();
    if (q.a) on_device.a_scales = q.a->scales.data();
  }
  if (refs.b != nullptr) {
    on_device.b = q.b.data.data();
    on_device.b_scales = q.b.scales.data();
  }
  return on_device;
}

// A host-memory device's kernels read quantized operands as uploaded: resident ones the
// store re-laid out (--quantized_layout=swap-ab) are read back canonical into one buffer
// for this request.
absl::Status UnpackReLaidOut(const GemmRequestContext& context, const TensorRefs& refs,
                             PlacedQuantized* out) {
  wire::QuantizedPayloads& p = out->payloads;
  struct Operand {
    const StoredTensor* tensor;
    absl::string_view* data;
    absl::string_view* scales;
  };
  std::vector<Operand> moved;
  int64_t bytes = 0;
  for (Operand o : {Operand{refs.a.get(), &p.a_data, &p.a_scales},
                    Operand{refs.b.get(), &p.b_data, &p.b_scales}}) {
    if (o.tensor == nullptr || o.tensor->layout == WeightLayout::kCanonical) continue;
    moved.push_back(o);
    bytes += DataBytes(o.tensor->spec) + ScaleBytes(o.tensor->spec);
  }
  if (moved.empty()) return absl::OkStatus();
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<HostBuffer>> buffer =
      context.memory->AcquireBuffer(static_cast<size_t>(bytes));
  if (!buffer.ok()) return buffer.status();
  char* at = (*buffer)->data();
  for (const Operand& o : moved) {
    const int64_t data_bytes = DataBytes(o.tensor->spec), scale_bytes = ScaleBytes(o.tensor->spec);
    if (absl::Status s = ReadCanonical(*o.tensor, false, 0, data_bytes, at); !s.ok()) return s;
    if (absl::Status s = ReadCanonical(*o.tensor, true, 0, scale_bytes, at + data_bytes); !s.ok()) {
      return s;
    }
    *o.data = absl::string_view(at, static_cast<size_t>(data_bytes));
    *o.scales = absl::string_view(at + data_bytes, static_cast<size_t>(scale_bytes));
    at += data_bytes + scale_bytes;
  }
  out->unpacked = *std::move(buffer);
  out->took += absl::Now() - start;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Reservation> ReserveReceived(const GemmRequestContext& context, int64_t size) {
  if (size > context.limits.max_message_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the request is ", size, " bytes; this server accepts at most ",
        context.limits.max_message_bytes, " (--max_message_bytes)"));
  }
  return context.memory->Reserve(size);
}

absl::StatusOr<Received> TakeReceived(const GemmRequestContext& context, grpc::ByteBuffer* bytes) {
  Received received;
  absl::StatusOr<Reservation> reserved =
      ReserveReceived(context, static_cast<int64_t>(bytes->Length()));
  if (!reserved.ok()) return reserved.status();
  received.reservation = *std::move(reserved);
  // Dump takes references to gRPC's slices; no byte is copied.
  if (grpc::Status s = bytes->Dump(&received.slices); !s.ok()) {
    return absl::InternalError(absl::StrCat("reading the received request: ", s.error_message()));
  }
  bytes->Clear();
  for (const grpc::Slice& slice : received.slices) {
    received.runs.Append(
        absl::string_view(reinterpret_cast<const char*>(slice.begin()), slice.size()));
  }
  return received;
}

absl::StatusOr<Bound> BindMatmul(TensorStore* store, absl::string_view tenant,
                                 gemm::v1::MatmulRequest* head) {
  TensorRefs refs;
  MatmulResidency residency;
  if (absl::Status s = ResolveMatmulRefs(store, tenant, head, &refs, &residency); !s.ok()) {
    return s;
  }
  absl::StatusOr<Bound> bound = Bind(refs);
  if (!bound.ok()) return bound.status();
  bound->refs = std::move(refs);
  bound->residency = residency;
  return bound;
}

absl::StatusOr<Bound> BindQuantized(TensorStore* store, absl::string_view tenant,
                                    gemm::v1::QuantizedMatmulRequest* head) {
  TensorRefs refs;
  if (absl::Status s = ResolveQuantizedRefs(store, tenant, head, &refs); !s.ok()) return s;
  absl::StatusOr<Bound> bound = Bind(refs);
  if (!bound.ok()) return bound.status();
  bound->refs = std::move(refs);
  return bound;
}

MatmulPayloads LocatedPayloads(const wire::MatmulRequestWire& located, const TensorRefs& refs) {
  auto sized = [](const wire::ByteRuns& runs) { return absl::string_view(nullptr, runs.size()); };
  MatmulPayloads p{sized(located.a_data), sized(located.b_data), sized(located.c_data)};
  if (refs.a != nullptr) p.a = DataOf(*refs.a);
  if (refs.b != nullptr) p.b = DataOf(*refs.b);
  if (refs.c != nullptr) p.c = DataOf(*refs.c);
  return p;
}

absl::StatusOr<PlacedMatmul> PlaceMatmul(const GemmRequestContext& context,
                                         const wire::MatmulRequestWire& located,
                                         const TensorRefs& refs, const GemmProblem& problem,
                                         const RegionPayloads* regions) {
  PlacedMatmul out;
  MatmulPayloads views;
  const absl::Time start = absl::Now();
  absl::StatusOr<PlacedPayloads> placed =
      PlacePayloads(context.memory, context.copier,
                    {{&located.a_data, &views.a, &out.pieces.a, InRegion(regions, located.a_data)},
                     {&located.b_data, &views.b, &out.pieces.b, InRegion(regions, located.b_data)},
                     {&located.c_data, &views.c, &out.pieces.c_in,
                      InRegion(regions, located.c_data)}},
                    context.device_gathers_pieces);
  if (!placed.ok()) return placed.status();
  out.copied = std::move(placed->buffer);
  out.uses_received = placed->uses_wire;
  out.took = absl::Now() - start;
  if (refs.a != nullptr) views.a = DataOf(*refs.a);
  if (refs.b != nullptr) views.b = DataOf(*refs.b);
  if (refs.c != nullptr) views.c = DataOf(*refs.c);
  // beta == 0: C is not an input (BLAS semantics), whatever was sent.
  out.host = {views.a.data(), views.b.data(), problem.beta != 0.0f ? views.c.data() : nullptr,
              nullptr};
  // A device whose resident memory is its own reads those operands there.
  if (!context.resident_in_host_memory) {
    if (refs.a != nullptr) std::swap(out.on_device.a, out.host.a);
    if (refs.b != nullptr) std::swap(out.on_device.b, out.host.b);
    if (refs.c != nullptr) std::swap(out.on_device.c_in, out.host.c_in);
  }
  return out;
}

absl::StatusOr<PlacedQuantized> PlaceQuantized(const GemmRequestContext& context,
                                               const wire::QuantizedMatmulRequestWire& located,
                                               const TensorRefs& refs,
                                               const RegionPayloads* regions) {
  PlacedQuantized out;
  wire::QuantizedPayloads& p = out.payloads;
  const absl::Time start = absl::Now();
  absl::StatusOr<PlacedPayloads> placed =
      PlacePayloads(context.memory, context.copier,
                    {{&located.a_data, &p.a_data, nullptr, InRegion(regions, located.a_data)},
                     {&located.a_scales, &p.a_scales, nullptr, InRegion(regions, located.a_scales)},
                     {&located.a_dense_data, &p.a_dense_data, nullptr,
                      InRegion(regions, located.a_dense_data)},
                     {&located.b_data, &p.b_data, nullptr, InRegion(regions, located.b_data)},
                     {&located.b_scales, &p.b_scales, nullptr, InRegion(regions, located.b_scales)}});
  if (!placed.ok()) return placed.status();
  out.copied = std::move(placed->buffer);
  out.uses_received = placed->uses_wire;
  out.took = absl::Now() - start;
  if (refs.a != nullptr) {
    const bool quantized = refs.a->spec.quantized;
    (quantized ? p.a_data : p.a_dense_data) = DataOf(*refs.a);
    if (quantized) p.a_scales = ScalesOf(*refs.a);
  }
  if (refs.b != nullptr) {
    p.b_data = DataOf(*refs.b);
    p.b_scales = ScalesOf(*refs.b);
  }
  if (context.resident_in_host_memory) {
    if (absl::Status s = UnpackReLaidOut(context, refs, &out); !s.ok()) return s;
  }
  return out;
}

absl::StatusOr<QuantizedInputs> QuantizedInputsFor(const GemmRequestContext& context,
                                                   const gemm::v1::QuantizedMatmulRequest& head,
                                                   const ValidatedQuantized& v,
                                                   const wire::QuantizedPayloads& payloads,
                                                   QuantizedOperands packed,
                                                   const TensorRefs& refs, KernelPath path) {
  QuantizedInputs in;
  in.packed = std::move(packed);
  if (path == KernelPath::kPacked) {
    in.on_device = ResidentPacked(context, in.packed, refs);
    return in;
  }
  // The rest read operands on the host: a tensor in device memory cannot go.
  const bool dequantize_a = path == KernelPath::kDenseA;
  const bool host_reads_resident =
      dequantize_a ? refs.a != nullptr : refs.a != nullptr || refs.b != nullptr;
  if (!context.resident_in_host_memory && host_reads_resident) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no quantized kernel here takes these operands on the device (",
        dequantize_a ? "A would be dequantized on the host"
                     : "they would be dequantized on the host",
        "), and resident tensors in device memory are not read on the host; send them inline"));
  }
  // A alone for a kernel that reads A dense (at most 64 rows), or both operands to FP32
  // for the FP32 GEMM; the memory reserved first.
  const int64_t floats = (v.m + (dequantize_a ? 0 : v.n)) * v.k;
  absl::StatusOr<Reservation> reserved = context.memory->Reserve(floats * 4);
  if (!reserved.ok()) return reserved.status();
  in.dequantized_reservation = *std::move(reserved);
  const absl::Time start = absl::Now();
  // No zero-fill: dequantizing writes every element.
  in.dequantized.reset(new float[static_cast<size_t>(floats)]);
  float* a = in.dequantized.get();
  if (dequantize_a) {
    if (absl::Status s = DequantizeOperand(*in.packed.a, v.m, v.k, a); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("a: ", s.message()));
    }
    in.packed.a.reset();
    in.packed.a_dense_type = DataType::kFloat32;
    in.packed.a_dense = absl::string_view(reinterpret_cast<const char*>(a),
                                          static_cast<size_t>(v.m * v.k) * sizeof(float));
    in.on_device = ResidentPacked(context, in.packed, refs);
  } else {
    float* b = a + v.m * v.k;
    if (absl::Status s = DequantizeOperands(head, v, payloads, a, b); !s.ok()) return s;
    in.host = {a, b, nullptr, nullptr};
  }
  in.took = absl::Now() - start;
  return in;
}

absl::StatusOr<std::shared_ptr<StoredTensor>> AllocateKeptC(
    const GemmRequestContext& context, const gemm::v1::ResidentResult& keep,
    const std::vector<int64_t>& shape, DataType dtype, int device, const std::string& tenant) {
  if (context.store == nullptr) {
    return absl::FailedPreconditionError(
        "keep_c is set but this server keeps no resident tensors (--tensor_store_bytes=0)");
  }
  TensorSpec spec;
  spec.shape = shape;
  spec.dtype = dtype;
  absl::StatusOr<std::shared_ptr<StoredTensor>> kept = context.store->Allocate(
      spec, device, absl::Seconds(keep.ttl_s()), keep.label(), tenant, keep.temporary());
  if (!kept.ok()) {
    return absl::Status(kept.status().code(), absl::StrCat("keep_c: ", kept.status().message()));
  }
  return kept;
}

}  // namespace gemmd
