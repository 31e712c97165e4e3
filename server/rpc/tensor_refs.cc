#include "server/rpc/tensor_refs.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/proto_types.h"

namespace gemmd {
namespace {

gemm::v1::QuantFormat FormatToProto(QuantFormat format) {
  return format == QuantFormat::kInt8 ? gemm::v1::QUANT_FORMAT_INT8 : gemm::v1::QUANT_FORMAT_NVFP4;
}

// Pins `handle` for field `name`: NOT_FOUND / FAILED_PRECONDITION prefixed with the field.
absl::StatusOr<TensorPin> Pin(TensorStore* store, absl::string_view tenant,
                              const gemm::v1::TensorHandle& handle, absl::string_view name) {
  if (store == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, " is set but this server keeps no resident tensors "
                           "(--tensor_store_bytes=0)"));
  }
  absl::StatusOr<TensorPin> pin = store->Acquire(handle.handle(), tenant);
  if (!pin.ok()) {
    return absl::Status(pin.status().code(), absl::StrCat(name, ": ", pin.status().message()));
  }
  return pin;
}

absl::Status BothSet(absl::string_view inline_name, absl::string_view ref_name) {
  return absl::InvalidArgumentError(absl::StrCat(inline_name, " and ", ref_name,
                                                 " are both set; send the operand one way"));
}

absl::Status WrongKind(absl::string_view name, const StoredTensor& t, absl::string_view want) {
  return absl::InvalidArgumentError(absl::StrCat(name, " names a ", SpecText(t.spec),
                                                 " tensor; expected ", want));
}

}  // namespace

absl::StatusOr<int> TensorRefs::Device() const {
  const TensorPin* first = nullptr;
  const char* first_name = nullptr;
  const std::pair<const TensorPin*, const char*> pins[] = {{&a, "A"}, {&b, "B"}, {&c, "C"}};
  for (const auto& [pin, name] : pins) {
    if (*pin == nullptr) continue;
    if (first == nullptr) {
      first = pin;
      first_name = name;
    } else if ((*pin)->device_index != (*first)->device_index) {
      return absl::FailedPreconditionError(absl::StrCat(
          first_name, " is resident on ", DeviceId((*first)->device->description()), " and ",
          name, " on ", DeviceId((*pin)->device->description()),
          "; one GEMM reads the resident operands of one device (upload them with the same "
          "header.device; ListTensors shows where each one is)"));
    }
  }
  if (first == nullptr) return -1;
  if (absl::Status s = (*first)->CheckDeviceHealthy(); !s.ok()) return s;
  return (*first)->device_index;
}

int64_t TensorRefs::Bytes() const {
  int64_t bytes = 0;
  for (const TensorPin* pin : {&a, &b, &c}) {
    if (*pin != nullptr) bytes += DataBytes((*pin)->spec) + ScaleBytes((*pin)->spec);
  }
  return bytes;
}

gemm::v1::Tensor DenseHead(const StoredTensor& t) {
  gemm::v1::Tensor head;
  for (int64_t d : t.spec.shape) head.add_shape(d);
  head.set_dtype(DataTypeToProto(t.spec.dtype));
  return head;
}

gemm::v1::QuantizedTensor QuantizedHead(const StoredTensor& t) {
  gemm::v1::QuantizedTensor head;
  for (int64_t d : t.spec.shape) head.add_shape(d);
  head.set_format(FormatToProto(t.spec.format));
  head.set_tensor_scale(t.spec.tensor_scale);
  return head;
}

absl::string_view DataOf(const StoredTensor& t) {
  return absl::string_view(t.data(), static_cast<size_t>(DataBytes(t.spec)));
}

absl::string_view ScalesOf(const StoredTensor& t) {
  return absl::string_view(t.scales(), static_cast<size_t>(ScaleBytes(t.spec)));
}

absl::Status ResolveMatmulRefs(TensorStore* store, absl::string_view tenant,
                               gemm::v1::MatmulRequest* head,
                               TensorRefs* refs, MatmulResidency* residency) {
  struct Operand {
    bool has_inline;
    bool has_ref;
    const gemm::v1::TensorHandle* handle;
    TensorPin* pin;
    bool* resident;
    const char* inline_name;
    const char* ref_name;
  };
  const Operand operands[] = {
      {head->has_a(), head->has_a_ref(), &head->a_ref(), &refs->a, &residency->a, "a",
       "a_ref"},
      {head->has_b(), head->has_b_ref(), &head->b_ref(), &refs->b, &residency->b, "b",
       "b_ref"},
      {head->has_c(), head->has_c_ref(), &head->c_ref(), &refs->c, &residency->c, "c",
       "c_ref"},
  };
  for (int i = 0; i < 3; ++i) {
    const Operand& o = operands[i];
    if (!o.has_ref) continue;
    if (o.has_inline) return BothSet(o.inline_name, o.ref_name);
    absl::StatusOr<TensorPin> pin = Pin(store, tenant, *o.handle, o.ref_name);
    if (!pin.ok()) return pin.status();
    if ((*pin)->spec.quantized) {
      return WrongKind(o.ref_name, **pin,
                       "a dense FLOAT32/FLOAT16/BFLOAT16 tensor (quantized tensors are "
                       "QuantizedMatmul operands)");
    }
    gemm::v1::Tensor* out =
        i == 0 ? head->mutable_a() : i == 1 ? head->mutable_b() : head->mutable_c();
    *out = DenseHead(**pin);
    *o.pin = *std::move(pin);
    *o.resident = true;
  }
  residency->keep_c = head->has_keep_c();
  return absl::OkStatus();
}

absl::Status ResolveQuantizedRefs(TensorStore* store, absl::string_view tenant,
                                  gemm::v1::QuantizedMatmulRequest* head,
                                  TensorRefs* refs) {
  if (head->has_a_ref()) {
    if (head->has_a()) return BothSet("a", "a_ref");
    if (head->has_a_dense()) return BothSet("a_dense", "a_ref");
    absl::StatusOr<TensorPin> pin = Pin(store, tenant, head->a_ref(), "a_ref");
    if (!pin.ok()) return pin.status();
    if ((*pin)->spec.quantized) {
      *head->mutable_a() = QuantizedHead(**pin);
    } else {
      *head->mutable_a_dense() = DenseHead(**pin);
    }
    refs->a = *std::move(pin);
  }
  if (head->has_b_ref()) {
    if (head->has_b()) return BothSet("b", "b_ref");
    absl::StatusOr<TensorPin> pin = Pin(store, tenant, head->b_ref(), "b_ref");
    if (!pin.ok()) return pin.status();
    if (!(*pin)->spec.quantized) {
      return WrongKind("b_ref", **pin, "an INT8 or NVFP4 tensor (a quantized weight)");
    }
    *head->mutable_b() = QuantizedHead(**pin);
    refs->b = *std::move(pin);
  }
  return absl::OkStatus();
}

}  // namespace gemmd
