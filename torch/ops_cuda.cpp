// circlerope PyTorch operators on CUDA tensors: torch.ops.circlerope.rotary_table and
// rotary_apply (defined in ops.cpp) registered for the CUDA dispatch key. Compiled only when
// libtorch has CUDA and the project's CUDA kernels are on (torch/CMakeLists.txt); ops.cpp is
// untouched by it. The autograd kernel of ops.cpp calls rotary_apply through the dispatcher,
// so CUDA tensors get the same differentiable op, whose backward is the same kernel with -phi.
//
// Errors are ValueErrors with the same messages as on the CPU where the check is the same
// (the kernels' own checks run in circlerope::cuda), plus the device rules: q, k and the table
// on one CUDA device, float64 on the CPU only. The work is queued on PyTorch's current stream
// of that device, like any ATen op.
//
// Kept to APIs present in libtorch 1.13 (Debian, whose headers the build machines use to
// compile-check this file: ctest torch_ops_cuda_compiles) and in 2.x (checked against the
// PyTorch sources): TORCH_LIBRARY_IMPL, c10::cuda::CUDAGuard, c10::cuda::getCurrentCUDAStream,
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
#include "circlerope/kernels.h"
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

Tensor rotary_table_cuda(const Tensor& position_ids, std::int64_t rotary_dim,
                         const std::vector<std::int64_t>& sections, double theta,
                         const std::string& layout) {
  return guarded([&] {
    TORCH_CHECK_VALUE(position_ids.dim() == 3 && position_ids.size(0) == 3,
                      "position_ids must have shape [3, batch, seq_len] (temporal, height, width), got ",
                      shape_of(position_ids));
    TORCH_CHECK_VALUE(!position_ids.is_complex() && position_ids.scalar_type() != at::kBool,
                      "position_ids must hold real numbers, got ", position_ids.scalar_type());
    const cr::RotaryConfig config = cr::torch_ops::rotary_config_of(rotary_dim, sections, theta, layout);
    const c10::cuda::CUDAGuard guard(position_ids.device());
    const Tensor pos = position_ids.to(at::kFloat).contiguous();
    const std::int64_t batch = pos.size(1), seq_len = pos.size(2);
    // The kernels cannot see a non-finite position (they run on the device, asynchronously):
    // checked here with one reduction and one synchronisation per table, as the CPU op would
    // reject it. Only the axes the layout reads count, as on the CPU. Integer positions (the
    // Hugging Face compat modes return int64) cannot be non-finite: no check, no sync.
    const bool may_be_non_finite = at::isFloatingType(position_ids.scalar_type());
    std::vector<std::int64_t> used;
    for (int a : cr::frequency_axes(config))
      if (std::find(used.begin(), used.end(), a) == used.end()) used.push_back(a);
    std::sort(used.begin(), used.end());
    if (may_be_non_finite && pos.numel() > 0) {
      const Tensor read = pos.index_select(0, at::tensor(used, pos.options().dtype(at::kLong)));
      const Tensor bad = at::logical_not(at::isfinite(read));
      if (bad.any().item<bool>()) {
        const Tensor first = bad.nonzero().select(0, 0).cpu();  // (axis index, row, token)
        const std::int64_t a = used[static_cast<std::size_t>(first[0].item<std::int64_t>())];
        const std::int64_t b = first[1].item<std::int64_t>(), s = first[2].item<std::int64_t>();
        std::ostringstream m;
        m.precision(10);
        m << "rotary table: position of axis " << a << " at row " << b << ", token " << s << " is "
          << pos[a][b][s].item<float>() << " (positions must be finite)";
        throw cr::Error(m.str());
      }
    }
    Tensor table = at::empty({batch, seq_len, rotary_dim}, pos.options());
    cr::cuda::make_rotary_table_into(
        config, pos.data_ptr<float>(), batch, seq_len,
        {table.data_ptr<float>(), static_cast<std::size_t>(table.numel())}, current_stream(pos));
    return table;
  });
}

// x as the kernels' [batch, seq, heads, head_dim] view.
cr::HeadTensor head_view(const Tensor& x, bool heads_first, cr::DType dtype) {
  const int s = heads_first ? 2 : 1, h = heads_first ? 1 : 2;
  return {x.data_ptr(), dtype, {x.size(0), x.size(s), x.size(h), x.size(3)},
          {x.stride(0), x.stride(s), x.stride(h), x.stride(3)}};
}

std::tuple<Tensor, Tensor> rotary_apply_cuda(const Tensor& q, const Tensor& k, const Tensor& table,
                                             const std::string& pairing_text,
                                             const std::string& qk_layout, bool backward) {
  return guarded([&] {
    const cr::Pairing pairing = cr::parse_pairing(pairing_text);
    TORCH_CHECK_VALUE(qk_layout == "bhsd" || qk_layout == "bshd", "qk_layout '", qk_layout,
                      "' (expected bhsd or bshd)");
    const bool heads_first = qk_layout == "bhsd";
    for (const auto& [name, x] : {std::pair<const char*, const Tensor&>{"k", k}, {"table", table}})
      TORCH_CHECK_VALUE(x.device() == q.device(), "q is on ", q.device(), " but ", name, " is on ",
                        x.device(), "; q, k and the table must be on one device (build the table ",
                        "from position_ids on q's device)");
    TORCH_CHECK_VALUE(table.dim() == 3 && table.scalar_type() == at::kFloat,
                      "table must be float32 [batch, seq_len, rotary_dim] (from rotary_table), got ",
                      table.scalar_type(), " ", shape_of(table));
    const char* dims = heads_first ? "[batch, heads, seq_len, head_dim]" : "[batch, seq_len, heads, head_dim]";
    TORCH_CHECK_VALUE(q.dim() == 4, "q must be 4-D ", dims, " (qk_layout ", qk_layout, "), got shape ", shape_of(q));
    TORCH_CHECK_VALUE(k.dim() == 4, "k must be 4-D ", dims, " (qk_layout ", qk_layout, "), got shape ", shape_of(k));
    TORCH_CHECK_VALUE(q.scalar_type() == k.scalar_type(), "q is ", q.scalar_type(), " but k is ",
                      k.scalar_type(), " (rotate one dtype per call)");
    std::optional<cr::DType> dtype;
    switch (q.scalar_type()) {
      case at::kFloat: dtype = cr::DType::float32; break;
      case at::kBFloat16: dtype = cr::DType::bfloat16; break;
      case at::kHalf: dtype = cr::DType::float16; break;
      case at::kDouble:
        C10_THROW_ERROR(ValueError, "float64 q and k are rotated on the CPU only (the scalar path for "
                                    "gradcheck); on CUDA use float32, bfloat16 or float16");
      default:
        C10_THROW_ERROR(ValueError, "q and k must be float32, bfloat16, float16 or float64, got " +
                                        std::string(c10::toString(q.scalar_type())));
    }
    TORCH_CHECK_VALUE(table.size(2) >= 2 && table.size(2) <= 1024 && table.size(2) % 2 == 0,
                      "table's last dimension (the rotary dim) is ", table.size(2),
                      "; it must be even and in 2..1024");
    const int seq_dim = heads_first ? 2 : 1;
    for (const auto& [name, x] : {std::pair<const char*, const Tensor&>{"q", q}, {"k", k}}) {
      TORCH_CHECK_VALUE(x.size(0) == table.size(0) && x.size(seq_dim) == table.size(1), name,
                        " has shape ", shape_of(x), " (", qk_layout, "): batch ", x.size(0),
                        " and seq_len ", x.size(seq_dim), ", but the table was built for batch ",
                        table.size(0), " and seq_len ", table.size(1));
      TORCH_CHECK_VALUE(x.size(3) >= table.size(2), name, " has head_dim ", x.size(3),
                        ", smaller than the table's rotary dim ", table.size(2));
    }
    const c10::cuda::CUDAGuard guard(q.device());
    const Tensor values = table.contiguous();
    const cr::RotaryTableView view{values.data_ptr<float>(), values.size(0), values.size(1),
                                   static_cast<int>(values.size(2))};
    // empty_like keeps a dense input's strides (HF's transposed q stays transposed).
    Tensor q_out = at::empty_like(q);
    Tensor k_out = at::empty_like(k);
    const cr::RotaryTarget targets[] = {{head_view(q, heads_first, *dtype), head_view(q_out, heads_first, *dtype)},
                                        {head_view(k, heads_first, *dtype), head_view(k_out, heads_first, *dtype)}};
    cr::RotaryParams params;
    params.pairing = pairing;
    params.direction = backward ? cr::Direction::backward : cr::Direction::forward;
    cr::cuda::rotate(view, targets, params, current_stream(q));
    return std::make_tuple(q_out, k_out);
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(circlerope, CUDA, m) {
  m.impl("rotary_table", &rotary_table_cuda);
  m.impl("rotary_apply", &rotary_apply_cuda);
}
