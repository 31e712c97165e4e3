#include "server/devices/kernel_catalogue.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/observability/client_text.h"

namespace gemmd {
namespace {

// Which input a forced name belongs to on this backend, or FAILED_PRECONDITION listing
// what there is.
absl::StatusOr<KernelInput> ForcedInput(const std::vector<KernelDescription>& kernels,
                                        bool quantized_request, std::string_view name) {
  std::vector<std::string> dense, quantized;
  bool is_dense = false, is_quantized = false;
  for (const KernelDescription& k : kernels) {
    const bool q = k.input == KernelInput::kQuantized;
    (q ? quantized : dense).push_back(k.name);
    (q ? is_quantized : is_dense) |= k.name == name;
  }
  if (!quantized_request && is_quantized && !is_dense) {
    return absl::FailedPreconditionError(
        absl::StrCat("kernel ", std::string(name),
                     " is a QuantizedMatmul kernel (it multiplies quantized weights); Matmul "
                     "kernels here: ",
                     absl::StrJoin(dense, ", ")));
  }
  if (is_dense) return KernelInput::kDense;
  if (is_quantized) return KernelInput::kQuantized;
  return absl::FailedPreconditionError(absl::StrCat(
      "no kernel named '", ClientText(absl::string_view(name.data(), name.size())),
      "' on this server; Matmul kernels: ", absl::StrJoin(dense, ", "),
      "; QuantizedMatmul kernels: ",
      quantized.empty() ? std::string("none") : absl::StrJoin(quantized, ", ")));
}

}  // namespace

absl::StatusOr<KernelChoice> KernelCatalogue::Choose(const GemmProblem& problem,
                                                     const QuantizedOperands* quantized,
                                                     std::string_view forced) const {
  KernelInput forced_input = quantized != nullptr ? KernelInput::kQuantized : KernelInput::kDense;
  if (!forced.empty()) {
    absl::StatusOr<KernelInput> input = ForcedInput(Kernels(), quantized != nullptr, forced);
    if (!input.ok()) return input.status();
    forced_input = *input;
  }
  if (quantized != nullptr && forced_input == KernelInput::kQuantized) {
    absl::StatusOr<QuantizedChoice> choice = SelectQuantized(*quantized, forced);
    if (!choice.ok()) return choice.status();
    if (choice->kernel != nullptr) {
      const bool dequantize_a = choice->dense_a && quantized->a.has_value();
      return KernelChoice{choice->kernel, dequantize_a ? KernelPath::kDenseA : KernelPath::kPacked};
    }
    forced = "";  // no quantized kernel chosen (none was forced): the host path's own choice
  }
  absl::StatusOr<const Kernel*> kernel = Select(problem, forced);
  if (!kernel.ok()) return kernel.status();
  return KernelChoice{*kernel, quantized != nullptr ? KernelPath::kHost : KernelPath::kDense};
}

}  // namespace gemmd
