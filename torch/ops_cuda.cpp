// circlerope PyTorch operators on CUDA tensors: torch.ops.circlerope.rotary_table and
// rotary_apply (defined in ops.cpp) registered for the CUDA dispatch key. Compiled only when
// libtorch has CUDA and the project's CUDA kernels are on (torch/CMakeLists.txt); ops.cpp is
// untouched by it. The autograd formula (autograd.cpp) calls rotary_apply, so CUDA tensors
// get the same differentiable op, whose backward is the same kernel with -phi. The argument
// checks are op_common.h's, shared with the CPU front end.
//
// Errors are ValueErrors with the same messages as on the CPU where the check is the same
// (the kernels' own checks run in circlerope::cuda), plus the device rules: q, k and the table
// on one CUDA device, float64 on the CPU only. The work is queued on PyTorch's current stream
// of that device, like any ATen op, and nothing here waits for the device: every op can be
// captured in a CUDA graph. So a non-finite position is not checked on the host (that needs
// a synchronisation): its token's table entries are NaN and the kernel records it
// (cuda::take_position_error). The next rotary_table call on that device raises the CPU op's
// ValueError for it, if the kernel has finished by then; take_position_error(device) (the
// op below, circlerope.check_cuda_positions in Python) reports it when the caller chooses.
//
// Built against the CUDA torch from PyPI here (linked, never run without a GPU): its APIs are
// TORCH_LIBRARY_IMPL, c10::cuda::CUDAGuard, c10::cuda::getCurrentCUDAStream,
// CUDAStream::stream(), TORCH_CHECK_VALUE, C10_THROW_ERROR(ValueError, ...).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "circlerope/cuda.h"
#include "circlerope/rotary.h"
#include "op_common.h"

namespace {

using at::Tensor;
namespace cr = circlerope;
using cr::torch_ops::shape_of;

// circlerope::Error -> ValueError (a bad argument); a CUDA runtime failure -> RuntimeError.
template <class Body>
auto guarded(const Body& body) -> decltype(body()) {
  try {
    return body();
  } catch (const cr::Error& e) {
    C10_THROW_ERROR(ValueError, e.what());
  } catch (const cr::cuda::CudaError& e) {
    TORCH_CHECK(false, e.what());
  }
}

void* current_stream(const Tensor& t) {
  return static_cast<void*>(c10::cuda::getCurrentCUDAStream(t.device().index()).stream());
}

// A non-finite position met by an earlier table kernel on `device` that has finished: the
// CPU op's ValueError, saying it comes from an earlier call. A host read, no synchronisation.
void raise_pending_position_error(int device) {
  if (const std::optional<std::string> message = cr::cuda::take_position_error(device))
    throw cr::Error("an earlier rotary_table call on cuda:" + std::to_string(device) +
                    " met a non-finite position, and that table holds NaN for it: " + *message);
}

Tensor rotary_table_cuda(const Tensor& position_ids, std::int64_t rotary_dim,
                         const std::vector<std::int64_t>& sections, double theta,
                         const std::string& layout) {
  return guarded([&] {
    cr::torch_ops::check_position_ids(position_ids);
    const cr::RotaryConfig config = cr::torch_ops::rotary_config_of(rotary_dim, sections, theta, layout);
    const c10::cuda::CUDAGuard guard(position_ids.device());
    raise_pending_position_error(position_ids.device().index());
    const Tensor pos = position_ids.to(at::kFloat).contiguous();
    const std::int64_t batch = pos.size(1), seq_len = pos.size(2);
    Tensor table = at::empty({batch, seq_len, rotary_dim}, pos.options());
    cr::cuda::internal::make_rotary_table_into_device_memory(
        config, pos.data_ptr<float>(), batch, seq_len,
        {table.data_ptr<float>(), static_cast<std::size_t>(table.numel())}, current_stream(pos));
    return table;
  });
}

// The non-finite position recorded by table kernels on `device` since the last call, as the
// CPU op's message, and clears it; "" when there is none. Does not synchronise: the caller
// does, to cover every table queued so far.
std::string take_position_error(std::int64_t device) {
  return guarded([&] {
    TORCH_CHECK_VALUE(device >= 0 && device < 1024, "device must be a CUDA device index, got ", device);
    return cr::cuda::take_position_error(static_cast<int>(device)).value_or("");
  });
}

// Rotates q into q_out and k into k_out (the same tensors for the in-place op), after
// check_rotary_apply; the kernels check overlaps between the four views.
void rotate_cuda(const cr::torch_ops::RotaryCall& call, const Tensor& table, const Tensor& q,
                 const Tensor& k, const Tensor& q_out, const Tensor& k_out, bool backward) {
  TORCH_CHECK_VALUE(call.dtype.has_value(),
                    "float64 q and k are rotated on the CPU only (the scalar path for gradcheck); on "
                    "CUDA use float32, bfloat16 or float16");
  const c10::cuda::CUDAGuard guard(q.device());
  const Tensor values = table.contiguous();
  const cr::RotaryTableView view = cr::torch_ops::table_view(values);
  using cr::torch_ops::head_view;
  const cr::RotaryTarget targets[] = {
      {head_view(q, call.heads_first, *call.dtype), head_view(q_out, call.heads_first, *call.dtype)},
      {head_view(k, call.heads_first, *call.dtype), head_view(k_out, call.heads_first, *call.dtype)}};
  cr::RotaryParams params;
  params.pairing = call.pairing;
  params.direction = backward ? cr::Direction::backward : cr::Direction::forward;
  cr::cuda::internal::rotate_device_memory(view, targets, params, current_stream(q));
}

std::tuple<Tensor, Tensor> rotary_apply_cuda(const Tensor& q, const Tensor& k, const Tensor& table,
                                             const std::string& pairing, const std::string& qk_layout,
                                             bool backward) {
  return guarded([&] {
    const cr::torch_ops::RotaryCall call = cr::torch_ops::check_rotary_apply(q, k, table, pairing, qk_layout);
    // empty_like keeps a dense input's strides (HF's transposed q stays transposed).
    Tensor q_out = at::empty_like(q);
    Tensor k_out = at::empty_like(k);
    rotate_cuda(call, table, q, k, q_out, k_out, backward);
    return std::make_tuple(q_out, k_out);
  });
}

void rotary_apply_inplace_cuda(const Tensor& q, const Tensor& k, const Tensor& table,
                               const std::string& pairing, const std::string& qk_layout, bool backward) {
  guarded([&] {
    const cr::torch_ops::RotaryCall call = cr::torch_ops::check_rotary_apply(q, k, table, pairing, qk_layout);
    rotate_cuda(call, table, q, k, q, k, backward);
  });
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(circlerope, m) {
  m.def("take_position_error(int device) -> str", &take_position_error);
}

TORCH_LIBRARY_IMPL(circlerope, CUDA, m) {
  m.impl("rotary_table", &rotary_table_cuda);
  m.impl("rotary_apply", &rotary_apply_cuda);
  m.impl("rotary_apply_", &rotary_apply_inplace_cuda);
}

// Sparse, quantized and nested CUDA tensors reach these kernels too, whose first check
// (op_common.h, check_strided) refuses them by name, instead of the dispatcher's
// NotImplementedError.
#define CIRCLEROPE_REFUSE_KIND(key)                         \
  TORCH_LIBRARY_IMPL(circlerope, key, m) {                  \
    m.impl("rotary_table", &rotary_table_cuda);             \
    m.impl("rotary_apply", &rotary_apply_cuda);             \
    m.impl("rotary_apply_", &rotary_apply_inplace_cuda);    \
  }
CIRCLEROPE_REFUSE_KIND(SparseCUDA)
CIRCLEROPE_REFUSE_KIND(QuantizedCUDA)
CIRCLEROPE_REFUSE_KIND(NestedTensorCUDA)
#undef CIRCLEROPE_REFUSE_KIND
