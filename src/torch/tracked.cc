// What every tracked kind shares: restore targets, the restore context, dtype mapping.
#include "preempt/torch/tracked.h"

#include <memory>

#include <torch/utils.h>

namespace preempt::torch {
namespace {

[[noreturn]] void Fail(StatusCode code, const std::string& msg) { throw Error(Status(code, msg)); }

std::string Describe(DType dtype, const std::vector<int64_t>& shape) {
  std::string out = std::string(DTypeName(dtype)) + "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace

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

bool IsDirectTarget(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.is_contiguous() && t.numel() > 0 && !t.is_sparse();
}

void ExpectTensor(std::vector<RestoreTarget>* out, const std::string& name, const at::Tensor& live, bool optional) {
  if (!IsDirectTarget(live)) return ExpectOwned(out, name, optional);
  RestoreTarget rt;
  rt.name = name;
  rt.data = live.data_ptr();
  rt.nbytes = live.numel() * live.element_size();
  rt.dtype = ToDType(live.scalar_type());
  rt.shape.assign(live.sizes().begin(), live.sizes().end());
  rt.optional = optional;
  out->push_back(std::move(rt));
}

void ExpectOwned(std::vector<RestoreTarget>* out, const std::string& name, bool optional) {
  RestoreTarget rt;
  rt.name = name;
  rt.owned = true;
  rt.optional = optional;
  out->push_back(std::move(rt));
}

// ---------------------------------------------------------------------------------------------
RestoreContext::RestoreContext(RestoreResult* result) : r_(result) {
  for (const auto& t : r_->tensors) index_[t.name] = &t;
}

int64_t RestoreContext::step() const { return r_->step; }

bool RestoreContext::has(const std::string& name) const { return index_.count(name) > 0; }

std::string RestoreContext::take_blob(const std::string& name) {
  auto it = r_->owned.find(name);
  if (it == r_->owned.end()) Fail(StatusCode::kInternal, "restore: entry '" + name + "' was not read");
  std::string out(reinterpret_cast<const char*>(it->second.data()), it->second.size());
  r_->owned.erase(it);
  return out;
}

at::Tensor RestoreContext::take_tensor(const std::string& name, const at::Tensor* like) {
  auto info = index_.find(name);
  auto it = r_->owned.find(name);
  if (info == index_.end() || it == r_->owned.end()) Fail(StatusCode::kInternal, "restore: entry '" + name + "' was not read");
  const TensorInfo* ti = info->second;
  if (like && like->defined()) {
    const DType want = ToDType(like->scalar_type());
    const std::vector<int64_t> shape(like->sizes().begin(), like->sizes().end());
    if (ti->dtype != want || ti->shape != shape)
      Fail(StatusCode::kMismatch, "restore: tensor '" + name + "': checkpoint has " + Describe(ti->dtype, ti->shape) +
                                      ", target is " + Describe(want, shape));
  }
  auto holder = std::make_shared<AlignedBuffer>(std::move(it->second));
  r_->owned.erase(it);
  const at::ScalarType st = ToScalarType(ti->dtype);
  if (holder->size() == 0) return at::empty(ti->shape, at::TensorOptions().dtype(st));
  return at::from_blob(holder->data(), ti->shape, [holder](void*) mutable { holder.reset(); },
                       at::TensorOptions().dtype(st));
}

void RestoreContext::restore_into(const std::string& name, at::Tensor& live) {
  if (!r_->owned.count(name)) return;  // written in place by the store, or absent
  at::Tensor src = take_tensor(name, &live);
  ::torch::NoGradGuard no_grad;
  live.copy_(src);
}

}  // namespace preempt::torch
