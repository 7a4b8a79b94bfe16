// Internal to the PyTorch operators (ops.cpp, and ops_cuda.cpp in CUDA builds): the argument
// checks and views both devices' front ends share, so that a call is judged, and its errors
// worded, the same way on either device.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "circlerope/detail/quote.h"
#include "circlerope/rotary.h"
#include "circlerope/options.h"

namespace circlerope::torch_ops {

inline std::string shape_of(const at::Tensor& t) {
  std::ostringstream s;
  s << t.sizes();
  return s.str();
}

// Sparse and mkldnn tensors have no strides for the kernels to read; a nested tensor's
// strides are per component, and a quantized tensor's elements are not numbers the kernels
// read. The operators are registered for their dispatch keys too (ops.cpp), so that this
// check, not the dispatcher's NotImplementedError, answers a C++ or Python caller that passes
// one. Everything here reads only the tensor's metadata.
inline void check_strided(const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(!t.is_nested(), name, " is a nested tensor; circlerope's operators take dense tensors (",
                    name, ".to_padded_tensor(0) makes one)");
  TORCH_CHECK_VALUE(!t.is_quantized(), name, " is a quantized tensor (", t.scalar_type(),
                    "); circlerope's operators take real numbers (", name, ".dequantize() makes them)");
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, name, " is a ", t.layout(),
                    " tensor; circlerope's operators take dense (torch.strided) tensors (", name,
                    ".to_dense() makes one)");
}

// A [batch, seq_len] of tokens within the core's limit of one call, judged on the sizes alone:
// an expand() view of 2^40 tokens costs nothing until an operator converts or copies it, so
// this runs before any conversion, copy or allocation.
inline void check_tokens(const char* name, std::int64_t batch, std::int64_t seq_len) {
  TORCH_CHECK_VALUE(batch <= kMaxTokens && seq_len <= kMaxTokens && batch * seq_len <= kMaxTokens, name,
                    ": batch ", batch, " x seq_len ", seq_len, " is more than ", kMaxTokens,
                    " tokens, the limit of one call");
}

// At most `limit` elements, judged on the sizes (see check_tokens).
inline void check_count(const at::Tensor& t, const char* name, std::int64_t limit, const char* what) {
  TORCH_CHECK_VALUE(t.numel() <= limit, name, " has shape ", t.sizes(), ": more than ", limit, " ", what,
                    ", the limit of one call");
}

// The rotary options of rotary_table, read with the grammar every front end shares.
inline RotaryConfig rotary_config_of(std::int64_t rotary_dim, const std::vector<std::int64_t>& sections,
                                     double theta, const std::string& layout) {
  RotaryConfig config;
  set_rotary_option(config, "rotary_dim", OptionValue::integer(rotary_dim), "rotary_dim");
  set_rotary_option(config, "sections", OptionValue::integers(sections), "sections");
  set_rotary_option(config, "theta", OptionValue::number(theta), "theta");
  set_rotary_option(config, "layout", OptionValue::string(layout), "layout");
  validate(config);
  return config;
}

// rotary_table's positions: [3, batch, seq_len] of real numbers, within the limit of one call.
inline void check_position_ids(const at::Tensor& position_ids) {
  check_strided(position_ids, "position_ids");
  TORCH_CHECK_VALUE(position_ids.dim() == 3 && position_ids.size(0) == 3,
                    "position_ids must have shape [3, batch, seq_len] (temporal, height, width), got ",
                    shape_of(position_ids));
  check_tokens("position_ids", position_ids.size(1), position_ids.size(2));
  TORCH_CHECK_VALUE(!position_ids.is_complex() && position_ids.scalar_type() != at::kBool,
                    "position_ids must hold real numbers, got ", position_ids.scalar_type());
}

// What a rotary_apply call asks for, once its arguments are judged valid.
struct RotaryCall {
  Pairing pairing = Pairing::neox;
  bool heads_first = true;        // qk_layout "bhsd" (HF's q after transpose(1, 2)) or "bshd"
  std::optional<DType> dtype;     // empty: float64 (the CPU's scalar path)
};

// Every check of rotary_apply's arguments that does not depend on the device's kernels: the
// names, one device, the table's type and shape, q and k against the table, in the caller's
// dimension order (the kernels would report them in theirs, [batch, seq, heads, head_dim]).
inline RotaryCall check_rotary_apply(const at::Tensor& q, const at::Tensor& k, const at::Tensor& table,
                                     const std::string& pairing, const std::string& qk_layout) {
  RotaryCall call;
  for (const auto& [name, x] : {std::pair<const char*, const at::Tensor&>{"q", q}, {"k", k}, {"table", table}})
    check_strided(x, name);
  call.pairing = parse_pairing(pairing);
  TORCH_CHECK_VALUE(qk_layout == "bhsd" || qk_layout == "bshd", "qk_layout ", detail::quoted(qk_layout),
                    " (expected bhsd or bshd)");
  call.heads_first = qk_layout == "bhsd";
  for (const auto& [name, x] : {std::pair<const char*, const at::Tensor&>{"k", k}, {"table", table}})
    TORCH_CHECK_VALUE(x.device() == q.device(), "q is on ", q.device(), " but ", name, " is on ",
                      x.device(), "; q, k and the table must be on one device (build the table ",
                      "from position_ids on q's device)");
  TORCH_CHECK_VALUE(table.dim() == 3 && table.scalar_type() == at::kFloat,
                    "table must be float32 [batch, seq_len, rotary_dim] (from rotary_table), got ",
                    table.scalar_type(), " ", shape_of(table));
  check_tokens("table", table.size(0), table.size(1));  // before anything copies or allocates
  const char* dims = call.heads_first ? "[batch, heads, seq_len, head_dim]" : "[batch, seq_len, heads, head_dim]";
  TORCH_CHECK_VALUE(q.dim() == 4, "q must be 4-D ", dims, " (qk_layout ", qk_layout, "), got shape ", shape_of(q));
  TORCH_CHECK_VALUE(k.dim() == 4, "k must be 4-D ", dims, " (qk_layout ", qk_layout, "), got shape ", shape_of(k));
  TORCH_CHECK_VALUE(q.scalar_type() == k.scalar_type(), "q is ", q.scalar_type(), " but k is ",
                    k.scalar_type(), " (rotate one dtype per call)");
  switch (q.scalar_type()) {
    case at::kFloat: call.dtype = DType::float32; break;
    case at::kBFloat16: call.dtype = DType::bfloat16; break;
    case at::kHalf: call.dtype = DType::float16; break;
    case at::kDouble: break;
    default:
      C10_THROW_ERROR(ValueError, "q and k must be float32, bfloat16, float16 or float64, got " +
                                      std::string(c10::toString(q.scalar_type())));
  }
  TORCH_CHECK_VALUE(table.size(2) >= 2 && table.size(2) <= 1024 && table.size(2) % 2 == 0,
                    "table's last dimension (the rotary dim) is ", table.size(2),
                    "; it must be even and in 2..1024");
  const int seq_dim = call.heads_first ? 2 : 1;
  for (const auto& [name, x] : {std::pair<const char*, const at::Tensor&>{"q", q}, {"k", k}}) {
    TORCH_CHECK_VALUE(x.size(0) == table.size(0) && x.size(seq_dim) == table.size(1), name,
                      " has shape ", shape_of(x), " (", qk_layout, "): batch ", x.size(0),
                      " and seq_len ", x.size(seq_dim), ", but the table was built for batch ",
                      table.size(0), " and seq_len ", table.size(1));
    TORCH_CHECK_VALUE(x.size(3) >= table.size(2), name, " has head_dim ", x.size(3),
                      ", smaller than the table's rotary dim ", table.size(2));
  }
  return call;
}

// x as the kernels' [batch, seq, heads, head_dim] view.
inline HeadTensor head_view(const at::Tensor& x, bool heads_first, DType dtype) {
  const int s = heads_first ? 2 : 1, h = heads_first ? 1 : 2;
  return {x.data_ptr(), dtype, {x.size(0), x.size(s), x.size(h), x.size(3)},
          {x.stride(0), x.stride(s), x.stride(h), x.stride(3)}};
}

inline RotaryTableView table_view(const at::Tensor& contiguous_table) {
  return {contiguous_table.data_ptr<float>(), contiguous_table.size(0), contiguous_table.size(1),
          static_cast<int>(contiguous_table.size(2))};
}

}  // namespace circlerope::torch_ops
