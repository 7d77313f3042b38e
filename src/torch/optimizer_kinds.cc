// One entry per optimizer the torch layer captures (see optimizer_kinds.h).
#include "torch/optimizer_kinds.h"

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include "preempt/status.h"

namespace preempt::torch::internal {
namespace {

using namespace ::torch::optim;

OptionRef Value(const char* key, double& v) { return {key, &v, nullptr}; }
OptionRef Flag(const char* key, bool& v) { return {key, nullptr, &v}; }

// Binds a typed description (optimizer O, its param state S and options P) to the table's
// type-erased form.
template <class O, class S, class P>
OptimizerKind Kind(const char* name, ParamStateRefs (*state)(S&), std::vector<OptionRef> (*options)(P&)) {
  return {name,
          [](Optimizer& o) { return dynamic_cast<O*>(&o) != nullptr; },
          [] { return std::make_unique<S>(); },
          [state](OptimizerParamState& s) { return state(static_cast<S&>(s)); },
          [options](OptimizerOptions& o) { return options(static_cast<P&>(o)); }};
}

// Adam and AdamW have the same state and options.
template <class S>
ParamStateRefs AdamState(S& s) {
  return {&s.step(), {{"exp_avg", &s.exp_avg()}, {"exp_avg_sq", &s.exp_avg_sq()}, {"max_exp_avg_sq", &s.max_exp_avg_sq()}}};
}
template <class P>
std::vector<OptionRef> AdamOptionRefs(P& o) {
  return {Value("lr", o.lr()), Value("beta1", std::get<0>(o.betas())), Value("beta2", std::get<1>(o.betas())),
          Value("eps", o.eps()), Value("weight_decay", o.weight_decay()), Flag("amsgrad", o.amsgrad())};
}

}  // namespace

const std::vector<OptimizerKind>& OptimizerKinds() {
  static const std::vector<OptimizerKind> kinds = {
      Kind<Adam, AdamParamState, AdamOptions>("adam", AdamState, AdamOptionRefs),
      Kind<AdamW, AdamWParamState, AdamWOptions>("adamw", AdamState, AdamOptionRefs),
      Kind<SGD, SGDParamState, SGDOptions>(
          "sgd", [](SGDParamState& s) { return ParamStateRefs{nullptr, {{"momentum_buffer", &s.momentum_buffer()}}}; },
          [](SGDOptions& o) {
            return std::vector<OptionRef>{Value("lr", o.lr()), Value("momentum", o.momentum()),
                                          Value("dampening", o.dampening()), Value("weight_decay", o.weight_decay()),
                                          Flag("nesterov", o.nesterov())};
          }),
      Kind<RMSprop, RMSpropParamState, RMSpropOptions>(
          "rmsprop",
          [](RMSpropParamState& s) {
            return ParamStateRefs{&s.step(), {{"square_avg", &s.square_avg()},
                                              {"momentum_buffer", &s.momentum_buffer()},
                                              {"grad_avg", &s.grad_avg()}}};
          },
          [](RMSpropOptions& o) {
            return std::vector<OptionRef>{Value("lr", o.lr()), Value("alpha", o.alpha()), Value("eps", o.eps()),
                                          Value("weight_decay", o.weight_decay()), Value("momentum", o.momentum()),
                                          Flag("centered", o.centered())};
          }),
      Kind<Adagrad, AdagradParamState, AdagradOptions>(
          "adagrad", [](AdagradParamState& s) { return ParamStateRefs{&s.step(), {{"sum", &s.sum()}}}; },
          [](AdagradOptions& o) {
            return std::vector<OptionRef>{Value("lr", o.lr()), Value("lr_decay", o.lr_decay()),
                                          Value("weight_decay", o.weight_decay()),
                                          Value("initial_accumulator_value", o.initial_accumulator_value()),
                                          Value("eps", o.eps())};
          }),
  };
  return kinds;
}

const OptimizerKind& KindOf(Optimizer& optimizer, const std::string& tracked) {
  std::string names;
  for (const auto& k : OptimizerKinds()) {
    if (k.matches(optimizer)) return k;
    names += (names.empty() ? "" : ", ") + k.name;
  }
  throw Error(Status(StatusCode::kInvalidArgument,
                     "track '" + tracked + "': unsupported optimizer type (supported: " + names + ")"));
}

}  // namespace preempt::torch::internal
