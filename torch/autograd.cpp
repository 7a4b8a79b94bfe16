// The autograd formula of torch.ops.circlerope.rotary_apply, in C++: registered for the
// Autograd dispatch key, so that a differentiable call costs one C++ autograd node, not a
// Python one (torch.library.register_autograd runs Python on every call: about 12 us of host
// time per call, more than the CUDA kernel itself at a model's shapes).
//
// The rotation is linear in q and k with an orthogonal matrix per pair, so its vector-Jacobian
// product is the inverse rotation: the same operator with `backward` flipped (rotation by
// -phi). The backward calls the operator through the dispatcher, Autograd included, so it is
// differentiable itself and double backward works. No gradient for the table: positions are
// indices, not parameters. Fake tensors, torch.compile and torch.export reach this kernel
// like eager calls; the operator's fake kernel (circlerope/_registration.py) gives the shapes.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <string>
#include <tuple>

namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::tuple<Tensor, Tensor> call_rotary_apply(const Tensor& q, const Tensor& k, const Tensor& table,
                                             const std::string& pairing, const std::string& qk_layout,
                                             bool backward) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("circlerope::rotary_apply", "")
                             .typed<std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&,
                                                               const std::string&, const std::string&, bool)>();
  return op.call(q, k, table, pairing, qk_layout, backward);
}

class RotaryApply : public torch::autograd::Function<RotaryApply> {
 public:
  static variable_list forward(AutogradContext* ctx, const Tensor& q, const Tensor& k, const Tensor& table,
                               const std::string& pairing, const std::string& qk_layout, bool backward) {
    Tensor q_out, k_out;
    {
      const at::AutoDispatchBelowADInplaceOrView below;
      std::tie(q_out, k_out) = call_rotary_apply(q, k, table, pairing, qk_layout, backward);
    }
    // A table made under torch.inference_mode() cannot be saved for backward; a copy can.
    ctx->save_for_backward({table.is_inference() ? table.clone() : table});
    ctx->saved_data["pairing"] = pairing;
    ctx->saved_data["qk_layout"] = qk_layout;
    ctx->saved_data["backward"] = backward;
    return {q_out, k_out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Tensor table = ctx->get_saved_variables()[0];
    // Grads of an unused output arrive as zeros (materialize_grads, the default).
    auto [gq, gk] = call_rotary_apply(grads[0], grads[1], table, ctx->saved_data["pairing"].toStringRef(),
                                      ctx->saved_data["qk_layout"].toStringRef(),
                                      !ctx->saved_data["backward"].toBool());
    return {gq, gk, Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

std::tuple<Tensor, Tensor> rotary_apply_autograd(const Tensor& q, const Tensor& k, const Tensor& table,
                                                 const std::string& pairing, const std::string& qk_layout,
                                                 bool backward) {
  // Nothing to record: straight to the kernel, without the autograd Function's bookkeeping
  // (about 2 us of host time per call). The outputs then need no grad either.
  if (!at::GradMode::is_enabled() || (!q.requires_grad() && !k.requires_grad())) {
    const at::AutoDispatchBelowADInplaceOrView below;
    return call_rotary_apply(q, k, table, pairing, qk_layout, backward);
  }
  const variable_list out = RotaryApply::apply(q, k, table, pairing, qk_layout, backward);
  return {out[0], out[1]};
}

}  // namespace

TORCH_LIBRARY_IMPL(circlerope, Autograd, m) { m.impl("rotary_apply", &rotary_apply_autograd); }
