// preempt::torch — capture of LibTorch training state into staging, persist through the store,
// and exact restore into the live tensors.
#include "preempt/torch/training_state.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <thread>
#include <type_traits>

#include <ATen/Context.h>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <torch/cuda.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/archive.h>
#include <torch/utils.h>

#include "preempt/log.h"

namespace preempt::torch {
namespace {

using Clock = std::chrono::steady_clock;
double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

[[noreturn]] void Fail(StatusCode code, const std::string& msg) { throw Error(Status(code, msg)); }

void CheckTrackName(const std::string& name) {
  if (name.empty() || name.find(':') != std::string::npos || !IsValidEntryName(name + ":x"))
    Fail(StatusCode::kInvalidArgument, "track: invalid name '" + name + "' (entry name characters, no ':')");
}

std::string ShapeString(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::string Serialize(const std::function<void(cereal::PortableBinaryOutputArchive&)>& fn) {
  std::ostringstream os;
  {
    cereal::PortableBinaryOutputArchive ar(os);
    fn(ar);
  }
  return std::move(os).str();
}

// Parses a cereal blob entry; a blob that does not parse is corruption naming the entry.
template <class T>
void ParseBlob(const std::string& blob, const std::string& entry_name, T* out) {
  std::istringstream is(blob);
  try {
    cereal::PortableBinaryInputArchive ar(is);
    ar(*out);
  } catch (const std::exception& e) {
    Fail(StatusCode::kCorruption, "restore: entry '" + entry_name + "' does not parse: " + e.what());
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
DType ToDType(at::ScalarType t) {
  switch (t) {
    case at::kBool: return DType::kBool;
    case at::kByte: return DType::kUInt8;
    case at::kChar: return DType::kInt8;
    case at::kShort: return DType::kInt16;
    case at::kInt: return DType::kInt32;
    case at::kLong: return DType::kInt64;
    case at::kHalf: return DType::kFloat16;
    case at::kBFloat16: return DType::kBFloat16;
    case at::kFloat: return DType::kFloat32;
    case at::kDouble: return DType::kFloat64;
    case at::kComplexFloat: return DType::kComplex64;
    case at::kComplexDouble: return DType::kComplex128;
    default: break;
  }
  Fail(StatusCode::kInvalidArgument, std::string("unsupported tensor dtype ") + c10::toString(t));
}

at::ScalarType ToScalarType(DType t) {
  switch (t) {
    case DType::kBool: return at::kBool;
    case DType::kBytes:
    case DType::kUInt8: return at::kByte;
    case DType::kInt8: return at::kChar;
    case DType::kInt16: return at::kShort;
    case DType::kInt32: return at::kInt;
    case DType::kInt64: return at::kLong;
    case DType::kFloat16: return at::kHalf;
    case DType::kBFloat16: return at::kBFloat16;
    case DType::kFloat32: return at::kFloat;
    case DType::kFloat64: return at::kDouble;
    case DType::kComplex64: return at::kComplexFloat;
    case DType::kComplex128: return at::kComplexDouble;
  }
  Fail(StatusCode::kInvalidArgument, "unknown dtype");
}

// ---------------------------------------------------------------------------------------------
// One entry of a snapshot: a tensor (copied from live memory) or a blob (bytes made at snapshot).
struct Piece {
  std::string name;
  at::Tensor tensor;
  std::string blob;
  bool is_blob = false;
  size_t nbytes() const { return is_blob ? blob.size() : tensor.numel() * tensor.element_size(); }
};

// What restore() knows while tracked objects finish: the store's result and which entries were
// used by whom.
class RestoreContext {
 public:
  RestoreContext(RestoreResult* r, bool strict) : r_(r), strict_(strict) {
    for (const auto& t : r_->tensors) index_[t.name] = &t;
  }
  bool strict() const { return strict_; }
  bool has(const std::string& name) const { return index_.count(name) > 0; }
  const TensorInfo* info(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : it->second;
  }
  void use(const std::string& name) { used_.insert(name); }
  const std::set<std::string>& used() const { return used_; }
  // A missing entry: an error in strict mode, else logged and skipped (returns false).
  bool require(const std::string& name) {
    if (has(name)) return true;
    if (strict_) Fail(StatusCode::kNotFound, "restore: checkpoint has no entry '" + name + "'");
    PREEMPT_LOG_WARN("restore: checkpoint has no entry '%s'; left as is (non-strict)", name.c_str());
    return false;
  }
  std::string take_blob(const std::string& name) {
    auto it = r_->owned.find(name);
    if (it == r_->owned.end()) Fail(StatusCode::kInternal, "restore: entry '" + name + "' was not read");
    use(name);
    return std::string(reinterpret_cast<const char*>(it->second.data()), it->second.size());
  }
  // The checkpoint's bytes of `name` as a tensor that owns them (no copy), after checking dtype
  // and (when `expect_shape`) shape against the caller's expectation.
  at::Tensor take_tensor(const std::string& name, const at::Tensor* like) {
    const TensorInfo* ti = info(name);
    if (!ti) Fail(StatusCode::kNotFound, "restore: checkpoint has no entry '" + name + "'");
    if (like && like->defined()) CheckMatch(name, *ti, *like);
    use(name);
    auto it = r_->owned.find(name);
    if (it == r_->owned.end()) Fail(StatusCode::kInternal, "restore: entry '" + name + "' was not read");
    auto holder = std::make_shared<AlignedBuffer>(std::move(it->second));
    r_->owned.erase(it);
    at::ScalarType st = ToScalarType(ti->dtype);
    if (holder->size() == 0) return at::empty(ti->shape, at::TensorOptions().dtype(st));
    return at::from_blob(holder->data(), ti->shape, [holder](void*) mutable { holder.reset(); },
                         at::TensorOptions().dtype(st));
  }
  static void CheckMatch(const std::string& name, const TensorInfo& ti, const at::Tensor& t) {
    DType want = ToDType(t.scalar_type());
    std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
    if (ti.dtype != want || ti.shape != shape)
      Fail(StatusCode::kMismatch, "restore: tensor '" + name + "': checkpoint has " +
                                      DTypeName(ti.dtype) + ShapeString(ti.shape) + ", target is " +
                                      DTypeName(want) + ShapeString(shape));
  }

 private:
  RestoreResult* r_;
  bool strict_;
  std::map<std::string, const TensorInfo*> index_;
  std::set<std::string> used_;
};

// ---------------------------------------------------------------------------------------------
class TrainingState::Tracked {
 public:
  explicit Tracked(std::string name) : name_(std::move(name)) {}
  virtual ~Tracked() = default;
  const std::string& name() const { return name_; }
  // Appends this object's entries as they are now.
  virtual void collect(std::vector<Piece>* out) = 0;
  // Entries restore can read straight into existing memory.
  virtual void targets(std::vector<RestoreTarget>* out) {}
  // After the store read everything: apply blobs, adopt owned tensors, mark used entries.
  virtual void finish(RestoreContext& ctx) = 0;
  // Restored after every other object (RNG: samplers may draw while being restored).
  virtual bool late() const { return false; }

 protected:
  std::string entry(const std::string& suffix) const { return name_ + ":" + suffix; }
  std::string name_;
};

namespace {

// A live tensor a restore can write into directly: CPU, contiguous, non-empty.
bool DirectTarget(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.is_contiguous() && t.numel() > 0 && !t.is_sparse();
}

RestoreTarget TargetFor(const std::string& name, const at::Tensor& t) {
  RestoreTarget rt;
  rt.name = name;
  rt.data = t.data_ptr();
  rt.nbytes = t.numel() * t.element_size();
  rt.dtype = ToDType(t.scalar_type());
  rt.shape.assign(t.sizes().begin(), t.sizes().end());
  return rt;
}

// Brings `live` to the checkpoint's value: already there when it was a direct target; otherwise
// copied from the owned bytes (non-contiguous, CUDA, empty).
void RestoreInto(RestoreContext& ctx, const std::string& name, at::Tensor& live) {
  if (!ctx.require(name)) return;
  if (DirectTarget(live)) {
    ctx.use(name);  // the store checked dtype and shape and wrote it
    return;
  }
  at::Tensor src = ctx.take_tensor(name, &live);
  ::torch::NoGradGuard no_grad;
  live.copy_(src);
}

// ---- module ---------------------------------------------------------------------------------
class TrackedModule : public TrainingState::Tracked {
 public:
  TrackedModule(std::string name, ::torch::nn::Module& m) : Tracked(std::move(name)), m_(m) {}

  std::vector<std::pair<std::string, at::Tensor>> tensors() const {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (const auto& kv : m_.named_parameters(/*recurse=*/true))
      if (kv.value().defined()) out.emplace_back(kv.key(), kv.value());
    for (const auto& kv : m_.named_buffers(/*recurse=*/true))
      if (kv.value().defined()) out.emplace_back(kv.key(), kv.value());
    return out;
  }
  void collect(std::vector<Piece>* out) override {
    for (auto& [n, t] : tensors()) out->push_back(Piece{entry(n), t.detach(), {}, false});
  }
  void targets(std::vector<RestoreTarget>* out) override {
    for (auto& [n, t] : tensors())
      if (DirectTarget(t)) out->push_back(TargetFor(entry(n), t));
  }
  void finish(RestoreContext& ctx) override {
    for (auto& [n, t] : tensors()) {
      at::Tensor live = t.detach();  // shares storage with the parameter
      RestoreInto(ctx, entry(n), live);
    }
  }

 private:
  ::torch::nn::Module& m_;
};

// ---- optimizer ------------------------------------------------------------------------------
// Per-group hyper-parameters, kept by name so a newer LibTorch with more options still loads.
struct GroupRecord {
  std::vector<std::string> keys;
  std::vector<double> values;
  int64_t num_params = 0;
  template <class A>
  void serialize(A& ar) { ar(keys, values, num_params); }
};
struct ParamRecord {
  bool has_state = false;
  int64_t step = 0;
  std::vector<std::string> tensors;  // state tensors present (defined)
  template <class A>
  void serialize(A& ar) { ar(has_state, step, tensors); }
};
struct OptimRecord {
  uint32_t version = 1;
  std::string kind;
  std::vector<GroupRecord> groups;
  std::vector<ParamRecord> params;
  template <class A>
  void serialize(A& ar) { ar(version, kind, groups, params); }
};

template <class Map>
auto StateKey(const at::Tensor& p) {
  using Key = typename std::decay_t<Map>::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    // LibTorch 1.x keys state by the TensorImpl address as text (c10::guts::to_string); 2.x by
    // the address itself.
    std::ostringstream os;
    os << static_cast<const void*>(p.unsafeGetTensorImpl());
    return os.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

class TrackedOptimizer : public TrainingState::Tracked {
 public:
  TrackedOptimizer(std::string name, ::torch::optim::Optimizer& o) : Tracked(std::move(name)), o_(o) {
    using namespace ::torch::optim;
    if (dynamic_cast<Adam*>(&o)) kind_ = "adam";
    else if (dynamic_cast<AdamW*>(&o)) kind_ = "adamw";
    else if (dynamic_cast<SGD*>(&o)) kind_ = "sgd";
    else if (dynamic_cast<RMSprop*>(&o)) kind_ = "rmsprop";
    else if (dynamic_cast<Adagrad*>(&o)) kind_ = "adagrad";
    else Fail(StatusCode::kInvalidArgument, "track '" + name_ + "': unsupported optimizer type (SGD, Adam, AdamW, RMSprop, Adagrad are)");
  }

  std::vector<at::Tensor> params() const {
    std::vector<at::Tensor> out;
    for (const auto& g : o_.param_groups())
      for (const auto& p : g.params()) out.push_back(p);
    return out;
  }

  // Named state tensors of one parameter (by reference to the state's fields).
  std::vector<std::pair<const char*, at::Tensor*>> state_tensors(::torch::optim::OptimizerParamState* s) const {
    using namespace ::torch::optim;
    std::vector<std::pair<const char*, at::Tensor*>> out;
    if (!s) return out;
    if (kind_ == "adam") {
      auto* a = static_cast<AdamParamState*>(s);
      out = {{"exp_avg", &a->exp_avg()}, {"exp_avg_sq", &a->exp_avg_sq()}, {"max_exp_avg_sq", &a->max_exp_avg_sq()}};
    } else if (kind_ == "adamw") {
      auto* a = static_cast<AdamWParamState*>(s);
      out = {{"exp_avg", &a->exp_avg()}, {"exp_avg_sq", &a->exp_avg_sq()}, {"max_exp_avg_sq", &a->max_exp_avg_sq()}};
    } else if (kind_ == "sgd") {
      out = {{"momentum_buffer", &static_cast<SGDParamState*>(s)->momentum_buffer()}};
    } else if (kind_ == "rmsprop") {
      auto* a = static_cast<RMSpropParamState*>(s);
      out = {{"square_avg", &a->square_avg()}, {"momentum_buffer", &a->momentum_buffer()}, {"grad_avg", &a->grad_avg()}};
    } else if (kind_ == "adagrad") {
      out = {{"sum", &static_cast<AdagradParamState*>(s)->sum()}};
    }
    return out;
  }
  int64_t get_step(::torch::optim::OptimizerParamState* s) const {
    using namespace ::torch::optim;
    if (kind_ == "adam") return static_cast<int64_t>(static_cast<AdamParamState*>(s)->step());
    if (kind_ == "adamw") return static_cast<int64_t>(static_cast<AdamWParamState*>(s)->step());
    if (kind_ == "rmsprop") return static_cast<int64_t>(static_cast<RMSpropParamState*>(s)->step());
    if (kind_ == "adagrad") return static_cast<int64_t>(static_cast<AdagradParamState*>(s)->step());
    return 0;
  }
  void set_step(::torch::optim::OptimizerParamState* s, int64_t v) const {
    using namespace ::torch::optim;
    if (kind_ == "adam") static_cast<AdamParamState*>(s)->step(v);
    else if (kind_ == "adamw") static_cast<AdamWParamState*>(s)->step(v);
    else if (kind_ == "rmsprop") static_cast<RMSpropParamState*>(s)->step(v);
    else if (kind_ == "adagrad") static_cast<AdagradParamState*>(s)->step(v);
  }
  std::unique_ptr<::torch::optim::OptimizerParamState> new_state() const {
    using namespace ::torch::optim;
    if (kind_ == "adam") return std::make_unique<AdamParamState>();
    if (kind_ == "adamw") return std::make_unique<AdamWParamState>();
    if (kind_ == "sgd") return std::make_unique<SGDParamState>();
    if (kind_ == "rmsprop") return std::make_unique<RMSpropParamState>();
    return std::make_unique<AdagradParamState>();
  }

  GroupRecord group_record(::torch::optim::OptimizerParamGroup& g) const {
    using namespace ::torch::optim;
    GroupRecord r;
    r.num_params = static_cast<int64_t>(g.params().size());
    auto put = [&r](const char* k, double v) { r.keys.push_back(k); r.values.push_back(v); };
    auto& o = g.options();
    if (kind_ == "adam" || kind_ == "adamw") {
      auto get = [&](auto& a) {
        put("lr", a.lr()); put("beta1", std::get<0>(a.betas())); put("beta2", std::get<1>(a.betas()));
        put("eps", a.eps()); put("weight_decay", a.weight_decay()); put("amsgrad", a.amsgrad() ? 1 : 0);
      };
      if (kind_ == "adam") get(static_cast<AdamOptions&>(o)); else get(static_cast<AdamWOptions&>(o));
    } else if (kind_ == "sgd") {
      auto& a = static_cast<SGDOptions&>(o);
      put("lr", a.lr()); put("momentum", a.momentum()); put("dampening", a.dampening());
      put("weight_decay", a.weight_decay()); put("nesterov", a.nesterov() ? 1 : 0);
    } else if (kind_ == "rmsprop") {
      auto& a = static_cast<RMSpropOptions&>(o);
      put("lr", a.lr()); put("alpha", a.alpha()); put("eps", a.eps()); put("weight_decay", a.weight_decay());
      put("momentum", a.momentum()); put("centered", a.centered() ? 1 : 0);
    } else if (kind_ == "adagrad") {
      auto& a = static_cast<AdagradOptions&>(o);
      put("lr", a.lr()); put("lr_decay", a.lr_decay()); put("weight_decay", a.weight_decay());
      put("initial_accumulator_value", a.initial_accumulator_value()); put("eps", a.eps());
    }
    return r;
  }

  void apply_group(::torch::optim::OptimizerParamGroup& g, const GroupRecord& r, size_t gi) const {
    using namespace ::torch::optim;
    std::map<std::string, double> v;
    for (size_t i = 0; i < r.keys.size() && i < r.values.size(); ++i) v[r.keys[i]] = r.values[i];
    auto get = [&](const char* k, double cur) {
      auto it = v.find(k);
      if (it == v.end()) {
        PREEMPT_LOG_WARN("restore %s: group %zu has no option '%s'; kept", name_.c_str(), gi, k);
        return cur;
      }
      return it->second;
    };
    auto& o = g.options();
    if (kind_ == "adam" || kind_ == "adamw") {
      auto set = [&](auto& a) {
        a.lr(get("lr", a.lr()));
        a.betas(std::make_tuple(get("beta1", std::get<0>(a.betas())), get("beta2", std::get<1>(a.betas()))));
        a.eps(get("eps", a.eps())); a.weight_decay(get("weight_decay", a.weight_decay()));
        a.amsgrad(get("amsgrad", a.amsgrad()) != 0);
      };
      if (kind_ == "adam") set(static_cast<AdamOptions&>(o)); else set(static_cast<AdamWOptions&>(o));
    } else if (kind_ == "sgd") {
      auto& a = static_cast<SGDOptions&>(o);
      a.lr(get("lr", a.lr())); a.momentum(get("momentum", a.momentum())); a.dampening(get("dampening", a.dampening()));
      a.weight_decay(get("weight_decay", a.weight_decay())); a.nesterov(get("nesterov", a.nesterov()) != 0);
    } else if (kind_ == "rmsprop") {
      auto& a = static_cast<RMSpropOptions&>(o);
      a.lr(get("lr", a.lr())); a.alpha(get("alpha", a.alpha())); a.eps(get("eps", a.eps()));
      a.weight_decay(get("weight_decay", a.weight_decay())); a.momentum(get("momentum", a.momentum()));
      a.centered(get("centered", a.centered()) != 0);
    } else if (kind_ == "adagrad") {
      auto& a = static_cast<AdagradOptions&>(o);
      a.lr(get("lr", a.lr())); a.lr_decay(get("lr_decay", a.lr_decay()));
      a.weight_decay(get("weight_decay", a.weight_decay()));
      a.initial_accumulator_value(get("initial_accumulator_value", a.initial_accumulator_value()));
      a.eps(get("eps", a.eps()));
    }
  }

  ::torch::optim::OptimizerParamState* find_state(const at::Tensor& p) const {
    auto& st = o_.state();
    auto it = st.find(StateKey<decltype(st)>(p));
    return it == st.end() ? nullptr : it->second.get();
  }

  void collect(std::vector<Piece>* out) override {
    OptimRecord rec;
    rec.kind = kind_;
    for (auto& g : o_.param_groups()) rec.groups.push_back(group_record(g));
    auto ps = params();
    for (size_t i = 0; i < ps.size(); ++i) {
      ParamRecord pr;
      auto* s = find_state(ps[i]);
      pr.has_state = s != nullptr;
      if (s) {
        pr.step = get_step(s);
        for (auto& [k, t] : state_tensors(s)) {
          if (!t->defined()) continue;
          pr.tensors.push_back(k);
          out->push_back(Piece{entry("state." + std::to_string(i) + "." + k), t->detach(), {}, false});
        }
      }
      rec.params.push_back(std::move(pr));
    }
    Piece meta;
    meta.name = entry("meta");
    meta.is_blob = true;
    meta.blob = Serialize([&](auto& ar) { ar(rec); });
    out->push_back(std::move(meta));
  }

  void targets(std::vector<RestoreTarget>* out) override {
    auto ps = params();
    for (size_t i = 0; i < ps.size(); ++i)
      for (auto& [k, t] : state_tensors(find_state(ps[i])))
        if (DirectTarget(*t)) out->push_back(TargetFor(entry("state." + std::to_string(i) + "." + k), *t));
  }

  void finish(RestoreContext& ctx) override {
    if (!ctx.require(entry("meta"))) return;
    OptimRecord rec;
    ParseBlob(ctx.take_blob(entry("meta")), entry("meta"), &rec);
    if (rec.kind != kind_)
      Fail(StatusCode::kMismatch, "restore: '" + name_ + "' is a " + kind_ + " optimizer, checkpoint has " + rec.kind);
    auto& groups = o_.param_groups();
    if (rec.groups.size() != groups.size())
      Fail(StatusCode::kMismatch, "restore: '" + name_ + "' has " + std::to_string(groups.size()) +
                                      " param groups, checkpoint has " + std::to_string(rec.groups.size()));
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      if (rec.groups[gi].num_params != static_cast<int64_t>(groups[gi].params().size()))
        Fail(StatusCode::kMismatch, "restore: '" + name_ + "' param group " + std::to_string(gi) + " has " +
                                        std::to_string(groups[gi].params().size()) + " params, checkpoint has " +
                                        std::to_string(rec.groups[gi].num_params));
      apply_group(groups[gi], rec.groups[gi], gi);
    }
    auto ps = params();
    auto& state = o_.state();
    for (size_t i = 0; i < ps.size(); ++i) {
      const ParamRecord& pr = rec.params[i];
      auto key = StateKey<decltype(state)>(ps[i]);
      if (!pr.has_state) {
        state.erase(key);
        continue;
      }
      auto it = state.find(key);
      if (it == state.end()) it = state.emplace(key, new_state()).first;
      auto* s = it->second.get();
      set_step(s, pr.step);
      std::set<std::string> present(pr.tensors.begin(), pr.tensors.end());
      for (auto& [k, t] : state_tensors(s)) {
        std::string name = entry("state." + std::to_string(i) + "." + k);
        if (!present.count(k)) {
          *t = at::Tensor();
          continue;
        }
        if (t->defined()) {
          RestoreInto(ctx, name, *t);
        } else {
          // No tensor yet (optimizer never stepped): adopt the bytes read by the store.
          at::Tensor src = ctx.take_tensor(name, nullptr);
          *t = ps[i].device().is_cpu() ? src : src.to(ps[i].device());
        }
      }
    }
  }

 private:
  ::torch::optim::Optimizer& o_;
  std::string kind_;
};

// ---- samplers -------------------------------------------------------------------------------
struct SamplerRecord {
  uint32_t version = 1;
  std::string kind;
  int64_t index = 0;
  int64_t epoch = 0;
  int64_t size = 0;
  template <class A>
  void serialize(A& ar) { ar(version, kind, index, epoch, size); }
};

// Samplers whose order is a pure function of their configuration and epoch: restore replays
// reset() and skips `index` samples.
template <class S>
class TrackedReplaySampler : public TrainingState::Tracked {
 public:
  TrackedReplaySampler(std::string name, S& s, std::string kind)
      : Tracked(std::move(name)), s_(s), kind_(std::move(kind)) {}
  int64_t epoch() const {
    if constexpr (std::is_base_of_v<::torch::data::samplers::DistributedSampler<>, S>)
      return static_cast<int64_t>(s_.epoch());
    return 0;
  }
  void collect(std::vector<Piece>* out) override {
    SamplerRecord r{1, kind_, static_cast<int64_t>(s_.index()), epoch(), 0};
    Piece p;
    p.name = entry("state");
    p.is_blob = true;
    p.blob = Serialize([&](auto& ar) { ar(r); });
    out->push_back(std::move(p));
  }
  void finish(RestoreContext& ctx) override {
    if (!ctx.require(entry("state"))) return;
    SamplerRecord r;
    ParseBlob(ctx.take_blob(entry("state")), entry("state"), &r);
    if (r.kind != kind_) Fail(StatusCode::kMismatch, "restore: '" + name_ + "' is a " + kind_ + ", checkpoint has " + r.kind);
    if constexpr (std::is_base_of_v<::torch::data::samplers::DistributedSampler<>, S>)
      s_.set_epoch(static_cast<size_t>(r.epoch));
    s_.reset();
    // Distributed samplers count index() from their rank's first sample.
    const int64_t base = static_cast<int64_t>(s_.index());
    if (r.index < base)
      Fail(StatusCode::kMismatch, "restore: '" + name_ + "': checkpoint index " + std::to_string(r.index) +
                                      " is before this sampler's first index " + std::to_string(base));
    int64_t left = r.index - base;
    while (left > 0) {
      size_t n = static_cast<size_t>(std::min<int64_t>(left, 1 << 16));
      auto b = s_.next(n);
      if (!b || b->empty()) Fail(StatusCode::kMismatch, "restore: '" + name_ + "': sampler ended before index " + std::to_string(r.index));
      left -= static_cast<int64_t>(b->size());
    }
  }

 private:
  S& s_;
  std::string kind_;
};

class TrackedResumableSampler : public TrainingState::Tracked {
 public:
  TrackedResumableSampler(std::string name, ResumableRandomSampler& s) : Tracked(std::move(name)), s_(s) {}
  void collect(std::vector<Piece>* out) override {
    SamplerRecord r{1, "resumable_random", static_cast<int64_t>(s_.index()), s_.epoch(), s_.size()};
    Piece p;
    p.name = entry("state");
    p.is_blob = true;
    p.blob = Serialize([&](auto& ar) { ar(r); });
    out->push_back(std::move(p));
    out->push_back(Piece{entry("perm"), s_.permutation(), {}, false});
  }
  void targets(std::vector<RestoreTarget>* out) override {
    if (DirectTarget(s_.permutation())) out->push_back(TargetFor(entry("perm"), s_.permutation()));
  }
  void finish(RestoreContext& ctx) override {
    if (!ctx.require(entry("state"))) return;
    SamplerRecord r;
    ParseBlob(ctx.take_blob(entry("state")), entry("state"), &r);
    if (r.kind != "resumable_random")
      Fail(StatusCode::kMismatch, "restore: '" + name_ + "' is a resumable_random sampler, checkpoint has " + r.kind);
    if (!ctx.require(entry("perm"))) return;
    at::Tensor perm;
    if (DirectTarget(s_.permutation()) && r.size == s_.size()) {
      ctx.use(entry("perm"));
      perm = s_.permutation();
    } else {
      perm = ctx.take_tensor(entry("perm"), nullptr);
    }
    s_.restore_state(perm, r.index, r.epoch);
  }

 private:
  ResumableRandomSampler& s_;
};

// ---- blobs and RNG --------------------------------------------------------------------------
class TrackedBlob : public TrainingState::Tracked {
 public:
  TrackedBlob(std::string name, std::function<std::string()> save, std::function<void(const std::string&)> load)
      : Tracked(std::move(name)), save_(std::move(save)), load_(std::move(load)) {}
  void collect(std::vector<Piece>* out) override {
    Piece p;
    p.name = name_;
    p.is_blob = true;
    p.blob = save_();
    out->push_back(std::move(p));
  }
  void finish(RestoreContext& ctx) override {
    if (!ctx.require(name_)) return;
    std::string bytes = ctx.take_blob(name_);
    try {
      load_(bytes);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      Fail(StatusCode::kCorruption, "restore: entry '" + name_ + "' does not load: " + e.what());
    }
  }

 private:
  std::function<std::string()> save_;
  std::function<void(const std::string&)> load_;
};

int CudaDevices() {
  // Guarded at run time: a CPU-only LibTorch answers false / 0 without touching CUDA.
  if (!at::hasCUDA() || !::torch::cuda::is_available()) return 0;
  return static_cast<int>(::torch::cuda::device_count());
}

class TrackedRng : public TrainingState::Tracked {
 public:
  TrackedRng() : Tracked("rng") {}
  bool late() const override { return true; }
  static std::vector<std::pair<std::string, at::Generator>> generators() {
    std::vector<std::pair<std::string, at::Generator>> out;
    out.emplace_back("cpu", at::detail::getDefaultCPUGenerator());
    int n = CudaDevices();
    for (int d = 0; d < n; ++d)
      out.emplace_back("cuda." + std::to_string(d),
                       at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(d))));
    return out;
  }
  void collect(std::vector<Piece>* out) override {
    for (auto& [n, g] : generators()) {
      at::Tensor st;
      {
        std::lock_guard<std::mutex> lock(g.mutex());
        st = g.get_state();
      }
      Piece p;
      p.name = entry(n);
      p.is_blob = true;
      p.blob.assign(reinterpret_cast<const char*>(st.data_ptr()), st.numel() * st.element_size());
      out->push_back(std::move(p));
    }
  }
  void finish(RestoreContext& ctx) override {
    for (auto& [n, g] : generators()) {
      if (!ctx.require(entry(n))) continue;
      std::string bytes = ctx.take_blob(entry(n));
      at::Tensor st = at::empty({static_cast<int64_t>(bytes.size())}, at::TensorOptions().dtype(at::kByte));
      std::memcpy(st.data_ptr(), bytes.data(), bytes.size());
      try {
        std::lock_guard<std::mutex> lock(g.mutex());
        g.set_state(st);
      } catch (const c10::Error& e) {
        Fail(StatusCode::kMismatch, "restore: entry '" + entry(n) + "': generator refused its state: " + e.what_without_backtrace());
      }
    }
  }
};

}  // namespace

// ---------------------------------------------------------------------------------------------
struct TrainingState::Staging {
  int id = 0;
  AlignedBuffer host;
  at::Tensor pinned;  // CUDA pinned host memory (when CUDA is available and pin_memory)
  uint8_t* data = nullptr;
  size_t capacity = 0;
  int64_t step = -1;
  uint64_t bytes = 0;
  std::vector<SaveItem> items;
  std::vector<Piece> pieces;  // checkpoint_in_place: keeps blobs and tensors alive while saving
  std::shared_ptr<SaveHandle> handle;
  bool busy() const { return handle && !handle->done(); }
};

TrainingState::TrainingState(TrainingStateOptions options) : options_(std::move(options)) {
  if (options_.staging_buffers < 1 || options_.staging_buffers > 2)
    Fail(StatusCode::kInvalidArgument, "TrainingStateOptions.staging_buffers must be 1 or 2");
  for (int i = 0; i < options_.staging_buffers; ++i) {
    staging_.push_back(std::make_unique<Staging>());
    staging_.back()->id = i;
  }
  if (options_.capture_rng) tracked_.push_back(std::make_unique<TrackedRng>());
}

TrainingState::~TrainingState() {
  Status s = wait_all();
  if (!s.ok()) PREEMPT_LOG_WARN("TrainingState: a save failed: %s", s.ToString().c_str());
}

void TrainingState::add(std::unique_ptr<Tracked> t) {
  CheckTrackName(t->name());
  for (const auto& o : tracked_)
    if (o->name() == t->name()) Fail(StatusCode::kInvalidArgument, "track: name '" + t->name() + "' is already tracked");
  // RNG stays last so that it is restored after everything that may draw from it.
  auto pos = tracked_.end();
  if (!tracked_.empty() && tracked_.back()->late()) pos = tracked_.end() - 1;
  tracked_.insert(pos, std::move(t));
}

void TrainingState::track(const std::string& name, ::torch::nn::Module& module) {
  add(std::make_unique<TrackedModule>(name, module));
}
void TrainingState::track(const std::string& name, ::torch::optim::Optimizer& optimizer) {
  add(std::make_unique<TrackedOptimizer>(name, optimizer));
}
void TrainingState::track(const std::string& name, ::torch::data::samplers::SequentialSampler& s) {
  add(std::make_unique<TrackedReplaySampler<::torch::data::samplers::SequentialSampler>>(name, s, "sequential"));
}
void TrainingState::track(const std::string& name, ::torch::data::samplers::DistributedSequentialSampler& s) {
  add(std::make_unique<TrackedReplaySampler<::torch::data::samplers::DistributedSequentialSampler>>(
      name, s, "distributed_sequential"));
}
void TrainingState::track(const std::string& name, ::torch::data::samplers::DistributedRandomSampler& s) {
  add(std::make_unique<TrackedReplaySampler<::torch::data::samplers::DistributedRandomSampler>>(
      name, s, "distributed_random"));
}
void TrainingState::track(const std::string& name, ResumableRandomSampler& s) {
  add(std::make_unique<TrackedResumableSampler>(name, s));
}
void TrainingState::track_blob(const std::string& name, std::function<std::string()> save,
                               std::function<void(const std::string&)> load) {
  add(std::make_unique<TrackedBlob>(name, std::move(save), std::move(load)));
}

// ---------------------------------------------------------------------------------------------
static std::vector<Piece> CollectAll(const std::vector<std::unique_ptr<TrainingState::Tracked>>& tracked) {
  std::vector<Piece> pieces;
  for (const auto& t : tracked) t->collect(&pieces);
  return pieces;
}

uint64_t TrainingState::state_bytes() const {
  uint64_t n = 0;
  for (const auto& p : CollectAll(tracked_)) n += p.nbytes();
  return n;
}

std::vector<std::string> TrainingState::entry_names() const {
  std::vector<std::string> out;
  for (const auto& p : CollectAll(tracked_)) out.push_back(p.name);
  return out;
}

TrainingStateStats TrainingState::stats() const {
  TrainingStateStats s = stats_;
  s.staging_bytes = 0;
  for (const auto& b : staging_) s.staging_bytes += b->capacity;
  for (const auto& b : staging_)
    if (s.first_error.ok() && b->handle && b->handle->done() && !b->handle->status().ok())
      s.first_error = b->handle->status();
  return s;
}

static uint64_t LayoutBytes(const std::vector<Piece>& pieces) {
  uint64_t off = 0;
  for (const auto& p : pieces) off = AlignUp(off, kIoAlignment) + p.nbytes();
  return AlignUp(off, kIoAlignment);
}

TrainingState::Staging* TrainingState::acquire(WhenBusy when_busy, Deadline deadline, Status* st) {
  auto t0 = Clock::now();
  stats_.last_wait_s = 0;
  for (;;) {
    // Keep the first background error before a handle is dropped.
    for (auto& b : staging_)
      if (b->handle && b->handle->done() && !b->handle->status().ok() && stats_.first_error.ok())
        stats_.first_error = b->handle->status();
    for (auto& b : staging_)
      if (!b->busy()) {
        stats_.last_wait_s = SecondsSince(t0);
        return b.get();
      }
    if (when_busy == WhenBusy::kSkip) {
      *st = Status(StatusCode::kAborted, "snapshot skipped: every staging buffer is still being persisted");
      return nullptr;
    }
    // Wait for the oldest running save.
    Staging* oldest = nullptr;
    for (auto& b : staging_)
      if (b->busy() && (!oldest || b->step < oldest->step)) oldest = b.get();
    Status w = oldest->handle->wait(deadline);
    if (w.code() == StatusCode::kDeadlineExceeded) {
      *st = Status(StatusCode::kDeadlineExceeded, "snapshot: no staging buffer became free before the deadline");
      return nullptr;
    }
  }
}

Status TrainingState::snapshot(int64_t step, WhenBusy when_busy, Deadline deadline) {
  Status st;
  Staging* buf = acquire(when_busy, deadline, &st);
  if (!buf) {
    if (st.code() == StatusCode::kAborted) stats_.skipped++;
    return st;
  }
  if (staged_ && staged_ != buf) staged_ = nullptr;  // the older unpersisted snapshot is dropped
  std::vector<Piece> pieces;
  try {
    pieces = CollectAll(tracked_);
  } catch (const Error& e) {
    return e.status();
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, std::string("snapshot: collecting state: ") + e.what());
  }
  const uint64_t need = LayoutBytes(pieces);
  stats_.last_alloc_s = 0;
  if (buf->capacity < need) {
    auto ta = Clock::now();
    buf->handle.reset();
    buf->pinned = at::Tensor();
    buf->host = AlignedBuffer();
    buf->data = nullptr;
    buf->capacity = 0;
    try {
      if (options_.pin_memory && CudaDevices() > 0) {
        buf->pinned = at::empty({static_cast<int64_t>(need)},
                                at::TensorOptions().dtype(at::kByte).pinned_memory(true));
        std::memset(buf->pinned.data_ptr(), 0, need);  // pre-fault
        buf->data = static_cast<uint8_t*>(buf->pinned.data_ptr());
      } else {
        buf->host = AlignedBuffer(need, /*prefault=*/true);
        buf->data = buf->host.data();
      }
    } catch (const std::exception& e) {
      return Status(StatusCode::kNoSpace, "snapshot: allocating " + std::to_string(need) +
                                              " bytes of staging failed: " + e.what());
    }
    buf->capacity = need;
    stats_.last_alloc_s = SecondsSince(ta);
    PREEMPT_LOG_INFO("snapshot: staging buffer %d sized to %llu bytes (%.3f s)", buf->id,
                     static_cast<unsigned long long>(need), stats_.last_alloc_s);
  }

  // The stall: copy every entry into staging.
  auto t0 = Clock::now();
  buf->items.clear();
  buf->items.reserve(pieces.size());
  uint64_t off = 0, bytes = 0;
  bool any_device = false;
  try {
    for (auto& p : pieces) {
      off = AlignUp(off, kIoAlignment);
      const size_t n = p.nbytes();
      uint8_t* dst = buf->data + off;
      SaveItem item;
      item.name = p.name;
      item.data = dst;
      item.nbytes = n;
      if (p.is_blob) {
        item.dtype = DType::kBytes;
        if (n) std::memcpy(dst, p.blob.data(), n);
      } else {
        const at::Tensor& t = p.tensor;
        item.dtype = ToDType(t.scalar_type());
        item.shape.assign(t.sizes().begin(), t.sizes().end());
        if (n == 0) {
        } else if (t.device().is_cpu() && t.is_contiguous()) {
          std::memcpy(dst, t.data_ptr(), n);
        } else {
          at::Tensor view = at::from_blob(dst, t.sizes(), at::TensorOptions().dtype(t.scalar_type()));
          bool dev = !t.device().is_cpu();
          view.copy_(t, /*non_blocking=*/dev && buf->pinned.defined());
          any_device = any_device || dev;
        }
      }
      buf->items.push_back(std::move(item));
      off += n;
      bytes += n;
    }
    if (any_device) ::torch::cuda::synchronize();
  } catch (const Error& e) {
    return e.status();
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, std::string("snapshot: copy into staging: ") + e.what());
  }
  buf->step = step;
  buf->bytes = bytes;
  staged_ = buf;
  stats_.snapshots++;
  stats_.last_stall_s = SecondsSince(t0);
  stats_.last_bytes = bytes;
  stats_.last_entries = pieces.size();
  return Status::OK();
}

std::shared_ptr<SaveHandle> TrainingState::checkpoint_in_place(Store& store, int64_t step, Deadline deadline) {
  // Saves already queued are written first by the store; nothing to wait for here.
  std::vector<Piece> pieces = CollectAll(tracked_);
  for (const auto& p : pieces) {
    if (!p.is_blob && p.nbytes() > 0 && !(p.tensor.device().is_cpu() && p.tensor.is_contiguous())) {
      return checkpoint_async(store, step, WhenBusy::kWait, deadline);
    }
  }
  if (in_place_ && in_place_->busy()) ThrowIfError(in_place_->handle->wait(deadline).WithContext("previous in-place save"));
  if (!in_place_) in_place_ = std::make_unique<Staging>();
  Staging* buf = in_place_.get();
  auto t0 = Clock::now();
  buf->pieces = std::move(pieces);
  buf->items.clear();
  buf->items.reserve(buf->pieces.size());
  uint64_t bytes = 0;
  for (const auto& p : buf->pieces) {
    SaveItem item;
    item.name = p.name;
    item.nbytes = p.nbytes();
    if (p.is_blob) {
      item.dtype = DType::kBytes;
      item.data = p.blob.data();
    } else {
      item.dtype = ToDType(p.tensor.scalar_type());
      item.shape.assign(p.tensor.sizes().begin(), p.tensor.sizes().end());
      item.data = item.nbytes ? p.tensor.data_ptr() : nullptr;
    }
    bytes += item.nbytes;
    buf->items.push_back(std::move(item));
  }
  buf->step = step;
  buf->bytes = bytes;
  stats_.snapshots++;
  stats_.last_stall_s = SecondsSince(t0);  // no copy: only collecting the entries
  stats_.last_bytes = bytes;
  stats_.last_entries = buf->pieces.size();
  staged_ = buf;
  return persist_async(store);
}

std::shared_ptr<SaveHandle> TrainingState::persist_async(Store& store) {
  if (!staged_) Fail(StatusCode::kInvalidArgument, "persist_async: no snapshot is staged");
  Staging* buf = staged_;
  staged_ = nullptr;
  SaveRequest req;
  req.step = buf->step;
  req.items = buf->items;  // points into buf: valid until the handle is done
  req.metadata = options_.metadata;
  req.metadata["preempt.torch.format"] = "1";
  std::string names;
  for (const auto& t : tracked_) names += (names.empty() ? "" : ",") + t->name();
  req.metadata["preempt.torch.tracked"] = names;
  buf->handle = store.save_async(std::move(req));
  last_checkpoint_ = Clock::now();
  have_last_checkpoint_ = true;
  return buf->handle;
}

std::shared_ptr<SaveHandle> TrainingState::checkpoint_async(Store& store, int64_t step, WhenBusy when_busy,
                                                            Deadline deadline) {
  Status s = snapshot(step, when_busy, deadline);
  if (s.code() == StatusCode::kAborted) return nullptr;
  ThrowIfError(s);
  return persist_async(store);
}

bool TrainingState::checkpoint_due(int64_t step) const {
  if (options_.every_steps > 0 && step > 0 && step % options_.every_steps == 0) return true;
  if (options_.every_seconds > 0) {
    if (!have_last_checkpoint_) return false;  // the clock starts at the first checkpoint / restore
    return std::chrono::duration<double>(Clock::now() - last_checkpoint_).count() >= options_.every_seconds;
  }
  return false;
}

std::shared_ptr<SaveHandle> TrainingState::maybe_checkpoint(Store& store, int64_t step) {
  if (options_.every_seconds > 0 && !have_last_checkpoint_) {
    last_checkpoint_ = Clock::now();
    have_last_checkpoint_ = true;
  }
  if (!checkpoint_due(step)) return nullptr;
  auto h = checkpoint_async(store, step, options_.when_busy, Deadline::Never());
  if (!h) {
    PREEMPT_LOG_INFO("periodic checkpoint at step %lld skipped: previous save still persisting",
                     static_cast<long long>(step));
  }
  return h;
}

Status TrainingState::wait_all(Deadline deadline) {
  Status first;
  for (auto& b : staging_) {
    if (!b->handle) continue;
    Status s = b->handle->wait(deadline);
    if (!s.ok() && first.ok()) first = s;
  }
  if (in_place_ && in_place_->handle) {
    Status s = in_place_->handle->wait(deadline);
    if (!s.ok() && first.ok()) first = s;
  }
  if (!first.ok() && stats_.first_error.ok()) stats_.first_error = first;
  return first;
}

void TrainingState::reserve() {
  std::vector<Piece> pieces = CollectAll(tracked_);
  const uint64_t need = LayoutBytes(pieces);
  for (auto& b : staging_) {
    if (b->busy() || b->capacity >= need) continue;
    if (staged_ == b.get()) staged_ = nullptr;
    b->pinned = at::Tensor();
    b->host = AlignedBuffer();
    if (options_.pin_memory && CudaDevices() > 0) {
      b->pinned = at::empty({static_cast<int64_t>(need)}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
      std::memset(b->pinned.data_ptr(), 0, need);
      b->data = static_cast<uint8_t*>(b->pinned.data_ptr());
    } else {
      b->host = AlignedBuffer(need, true);
      b->data = b->host.data();
    }
    b->capacity = need;
  }
}

// ---------------------------------------------------------------------------------------------
std::optional<int64_t> TrainingState::restore(Store& store, const RestoreOptions& opts, RestoreResult* result) {
  RestoreResult local;
  RestoreResult* r = result ? result : &local;
  if (!opts.step) {
    std::vector<int64_t> steps;
    ThrowIfError(store.valid_steps(&steps));
    if (steps.empty()) return std::nullopt;
  }
  std::vector<RestoreTarget> targets;
  for (const auto& t : tracked_) t->targets(&targets);
  RestoreOptions o = opts;
  o.strict = false;  // every untargeted entry comes back owned; strictness is checked below
  o.allocate_untargeted = true;
  Status s = store.restore(targets, o, r);
  if (!s.ok()) throw Error(s.WithContext("restore"));
  if (opts.strict && !r->missing.empty())
    Fail(StatusCode::kNotFound, "restore: checkpoint at step " + std::to_string(r->step) +
                                    " has no entry '" + r->missing.front() + "'" +
                                    (r->missing.size() > 1 ? " (and " + std::to_string(r->missing.size() - 1) + " more)" : ""));
  RestoreContext ctx(r, opts.strict);
  for (const auto& t : tracked_) t->finish(ctx);
  std::vector<std::string> extra;
  for (const auto& ti : r->tensors)
    if (!ctx.used().count(ti.name)) extra.push_back(ti.name);
  if (!extra.empty()) {
    if (opts.strict)
      Fail(StatusCode::kMismatch, "restore: checkpoint entry '" + extra.front() + "' is not tracked" +
                                      (extra.size() > 1 ? " (and " + std::to_string(extra.size() - 1) + " more)" : "") +
                                      " (use a non-strict restore to ignore it)");
    for (const auto& e : extra) PREEMPT_LOG_WARN("restore: checkpoint entry '%s' ignored (non-strict)", e.c_str());
  }
  last_checkpoint_ = Clock::now();
  have_last_checkpoint_ = true;
  return r->step;
}

// ---------------------------------------------------------------------------------------------
ResumableRandomSampler::ResumableRandomSampler(int64_t size, std::optional<uint64_t> seed)
    : size_(size), seed_(seed) {
  if (size < 0) Fail(StatusCode::kInvalidArgument, "ResumableRandomSampler: negative size");
  perm_ = at::arange(size_, at::TensorOptions().dtype(at::kLong));
}

void ResumableRandomSampler::reset(c10::optional<size_t> new_size) {
  if (new_size) size_ = static_cast<int64_t>(*new_size);
  if (seed_) {
    auto gen = at::detail::createCPUGenerator(*seed_ + static_cast<uint64_t>(epoch_));
    perm_ = at::randperm(size_, gen, at::TensorOptions().dtype(at::kLong));
  } else {
    perm_ = at::randperm(size_, at::TensorOptions().dtype(at::kLong));
  }
  index_ = 0;
  ++epoch_;
}

c10::optional<std::vector<size_t>> ResumableRandomSampler::next(size_t batch_size) {
  const int64_t left = size_ - index_;
  if (left <= 0) return c10::nullopt;
  const int64_t n = std::min<int64_t>(left, static_cast<int64_t>(batch_size));
  std::vector<size_t> out(static_cast<size_t>(n));
  const int64_t* p = perm_.data_ptr<int64_t>() + index_;
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<size_t>(p[i]);
  index_ += n;
  return out;
}

void ResumableRandomSampler::save(::torch::serialize::OutputArchive& archive) const {
  archive.write("index", at::tensor(index_), /*is_buffer=*/true);
  archive.write("epoch", at::tensor(epoch_), /*is_buffer=*/true);
  archive.write("perm", perm_, /*is_buffer=*/true);
}

void ResumableRandomSampler::load(::torch::serialize::InputArchive& archive) {
  at::Tensor idx = at::empty({}, at::kLong), ep = at::empty({}, at::kLong), perm;
  archive.read("index", idx, /*is_buffer=*/true);
  archive.read("epoch", ep, /*is_buffer=*/true);
  archive.read("perm", perm, /*is_buffer=*/true);
  restore_state(perm, idx.item<int64_t>(), ep.item<int64_t>());
}

void ResumableRandomSampler::restore_state(at::Tensor permutation, int64_t index, int64_t epoch) {
  if (!permutation.defined() || permutation.dim() != 1 || permutation.scalar_type() != at::kLong)
    Fail(StatusCode::kMismatch, "ResumableRandomSampler: permutation must be a 1-d int64 tensor");
  const int64_t n = permutation.size(0);
  if (index < 0 || index > n || epoch < 0)
    Fail(StatusCode::kCorruption, "ResumableRandomSampler: index " + std::to_string(index) +
                                      " out of range for size " + std::to_string(n));
  perm_ = permutation.contiguous();
  size_ = n;
  index_ = index;
  epoch_ = epoch;
}

}  // namespace preempt::torch
