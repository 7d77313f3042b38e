// Tracked kind: a torch::optim::Optimizer, generic over the table of optimizer_kinds.h.
//   <optim>:meta              kind, each param group's options by name, per-parameter step and
//                             which state tensors exist (cereal)
//   <optim>:state.<i>.<key>   per-parameter state tensors, i = index across all param groups
#include <map>
#include <set>
#include <utility>

#include "preempt/log.h"
#include "torch/kinds.h"
#include "torch/optimizer_kinds.h"
#include "torch/records.h"

namespace preempt::torch::internal {
namespace {

using ::torch::optim::Optimizer;
using ::torch::optim::OptimizerParamGroup;
using ::torch::optim::OptimizerParamState;

[[noreturn]] void Fail(StatusCode code, const std::string& msg) { throw Error(Status(code, msg)); }

using records::GroupRecord;
using records::OptimRecord;
using records::ParamRecord;

class TrackedOptimizer : public Tracked {
 public:
  TrackedOptimizer(std::string name, Optimizer& o) : Tracked(std::move(name)), o_(o), kind_(KindOf(o, this->name())) {}

  void collect(std::vector<Entry>* out) override {
    OptimRecord rec;
    rec.kind = kind_.name;
    for (auto& g : o_.param_groups()) rec.groups.push_back(group_record(g));
    auto ps = params();
    for (size_t i = 0; i < ps.size(); ++i) {
      ParamRecord pr;
      OptimizerParamState* s = find_state(ps[i]);
      pr.has_state = s != nullptr;
      if (s) {
        ParamStateRefs refs = kind_.state(*s);
        pr.step = refs.step ? *refs.step : 0;
        for (auto& [k, t] : refs.tensors) {
          if (!t->defined()) continue;
          pr.tensors.push_back(k);
          out->push_back(Entry::Tensor(state_entry(i, k), t->detach(), /*until_update=*/true));
        }
      }
      rec.params.push_back(std::move(pr));
    }
    out->push_back(Entry::Blob(entry("meta"), ToCerealBytes(rec)));
  }

  // Existing state tensors are expected back; state the optimizer has not created yet may be in
  // the checkpoint or not (the meta entry says which).
  void expect(std::vector<RestoreTarget>* out) override {
    ExpectOwned(out, entry("meta"));
    auto ps = params();
    auto blank = kind_.new_state();
    for (size_t i = 0; i < ps.size(); ++i) {
      OptimizerParamState* s = find_state(ps[i]);
      for (auto& [k, t] : kind_.state(s ? *s : *blank).tensors) {
        if (t->defined()) ExpectTensor(out, state_entry(i, k), *t);
        else ExpectOwned(out, state_entry(i, k), /*optional=*/true);
      }
    }
  }

  void apply(RestoreContext& ctx) override {
    if (!ctx.has(entry("meta"))) return;
    OptimRecord rec;
    FromCerealBytes(ctx.take_blob(entry("meta")), entry("meta"), &rec);
    if (rec.kind != kind_.name)
      Fail(StatusCode::kMismatch, "restore: '" + name() + "' is a " + kind_.name + " optimizer, checkpoint has " + rec.kind);
    apply_groups(rec);
    auto ps = params();
    if (rec.params.size() != ps.size())
      Fail(StatusCode::kCorruption, "restore: entry '" + entry("meta") + "' lists " + std::to_string(rec.params.size()) +
                                        " parameters, the param groups hold " + std::to_string(ps.size()));
    for (size_t i = 0; i < ps.size(); ++i) apply_param(ctx, i, ps[i], rec.params[i]);
  }

 private:
  std::string state_entry(size_t i, const char* key) const { return entry("state." + std::to_string(i) + "." + key); }

  std::vector<at::Tensor> params() const {
    std::vector<at::Tensor> out;
    for (const auto& g : o_.param_groups())
      for (const auto& p : g.params()) out.push_back(p);
    return out;
  }

  OptimizerParamState* find_state(const at::Tensor& p) const {
    auto& st = o_.state();
    auto it = st.find(StateKey<decltype(st)>(p));
    return it == st.end() ? nullptr : it->second.get();
  }

  GroupRecord group_record(OptimizerParamGroup& g) const {
    GroupRecord r;
    r.num_params = static_cast<int64_t>(g.params().size());
    for (const OptionRef& o : kind_.options(g.options())) {
      r.keys.push_back(o.key);
      r.values.push_back(o.value ? *o.value : (*o.flag ? 1 : 0));
    }
    return r;
  }

  void apply_groups(const OptimRecord& rec) {
    auto& groups = o_.param_groups();
    if (rec.groups.size() != groups.size())
      Fail(StatusCode::kMismatch, "restore: '" + name() + "' has " + std::to_string(groups.size()) +
                                      " param groups, checkpoint has " + std::to_string(rec.groups.size()));
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      const GroupRecord& r = rec.groups[gi];
      if (r.num_params != static_cast<int64_t>(groups[gi].params().size()))
        Fail(StatusCode::kMismatch, "restore: '" + name() + "' param group " + std::to_string(gi) + " has " +
                                        std::to_string(groups[gi].params().size()) + " params, checkpoint has " +
                                        std::to_string(r.num_params));
      std::map<std::string, double> saved;
      for (size_t i = 0; i < r.keys.size() && i < r.values.size(); ++i) saved[r.keys[i]] = r.values[i];
      for (const OptionRef& o : kind_.options(groups[gi].options())) {
        auto it = saved.find(o.key);
        if (it == saved.end()) {
          PREEMPT_LOG_WARN("restore %s: group %zu has no option '%s'; kept", name().c_str(), gi, o.key);
          continue;
        }
        if (o.value) *o.value = it->second;
        else *o.flag = it->second != 0;
      }
    }
  }

  void apply_param(RestoreContext& ctx, size_t i, const at::Tensor& param, const ParamRecord& pr) {
    auto& state = o_.state();
    auto key = StateKey<decltype(state)>(param);
    if (!pr.has_state) {
      state.erase(key);
      return;
    }
    auto it = state.find(key);
    if (it == state.end()) it = state.emplace(key, kind_.new_state()).first;
    ParamStateRefs refs = kind_.state(*it->second);
    if (refs.step) *refs.step = pr.step;
    const std::set<std::string> present(pr.tensors.begin(), pr.tensors.end());
    for (auto& [k, t] : refs.tensors) {
      const std::string name = state_entry(i, k);
      if (!present.count(k)) {
        *t = at::Tensor();
      } else if (!ctx.has(name)) {
        // A live tensor missing from the checkpoint is a strict error in the store (non-strict: left
        // as is); one the meta entry lists but the checkpoint lacks is not a checkpoint we wrote.
        if (!t->defined())
          Fail(StatusCode::kCorruption, "restore: entry '" + entry("meta") + "' lists '" + name + "', which is missing");
      } else if (t->defined()) {
        ctx.restore_into(name, *t);
      } else {
        // No tensor yet (optimizer never stepped): adopt the bytes read by the store.
        at::Tensor src = ctx.take_tensor(name, nullptr);
        *t = param.device().is_cpu() ? src : src.to(param.device());
      }
    }
  }

  Optimizer& o_;
  const OptimizerKind& kind_;
};

}  // namespace

std::unique_ptr<Tracked> TrackOptimizer(const std::string& name, Optimizer& optimizer) {
  return std::make_unique<TrackedOptimizer>(name, optimizer);
}

}  // namespace preempt::torch::internal
