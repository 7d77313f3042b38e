// preempt/torch/tracked.h — the extension point of TrainingState: one tracked object, the entries
// it puts into a checkpoint and how it takes them back.
//
// Every tracked kind (module, optimizer, LR scheduler, sampler, default generators, user extra)
// is a subclass of Tracked; TrainingState only calls this interface:
//   collect(out)  at snapshot: appends the object's entries as they are now. Tensor entries
//                 reference live memory (the snapshot copies them); blob entries are bytes made now.
//                 Mark a tensor until_update only when nothing but the optimizer update writes it.
//   expect(out)   before a restore: every entry the object wants back, as a RestoreTarget made by
//                 ExpectTensor (a live CPU-contiguous tensor the store writes into directly, or
//                 owned memory for the others) or ExpectOwned (bytes the object parses). The store
//                 checks the checkpoint against this list: with a strict restore an entry missing
//                 (unless optional) or one nobody expects is an error naming it.
//   apply(ctx)    after the store read and verified every byte: brings the object to the
//                 checkpoint's value (RestoreContext hands out what was read into owned memory).
// Entry names are "<tracked name>:<suffix>" (entry()), or the tracked name alone for one blob.
//
// Adding a kind: subclass Tracked in its own file and register an instance with
// TrainingState::track(std::unique_ptr<Tracked>); the typed track() overloads of TrainingState
// are one line each over that.
//
// Errors: these calls throw preempt::Error naming the entry, like the rest of the torch layer
// (see training_state.h); a LibTorch or cereal exception escaping them is reported by
// TrainingState as an internal error naming the tracked object.
// Thread-safety: called from the training thread only, like TrainingState.
#pragma once

#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <cereal/archives/portable_binary.hpp>
#include <cereal/types/string.hpp>  // records commonly hold strings and vectors
#include <cereal/types/vector.hpp>

#include "preempt/buffer.h"
#include "preempt/status.h"
#include "preempt/store.h"

namespace preempt::torch {

// One entry of a snapshot: a tensor (copied from live memory) or a blob (kBytes).
//
// `until_update` marks a tensor that only the optimizer update changes (parameters, optimizer
// state): an overlapped snapshot may still be copying it while the next step's forward and
// backward run, until the trainer's fence (TrainingState::before_update). Tensors without it
// (module buffers such as running statistics, which the forward pass changes, and every other
// kind) are copied before the snapshot call returns.
struct Entry {
  std::string name;
  at::Tensor tensor;
  std::string blob;
  bool is_blob = false;
  bool until_update = false;

  static Entry Tensor(std::string name, at::Tensor tensor, bool until_update = false) {
    return {std::move(name), std::move(tensor), {}, false, until_update};
  }
  static Entry Blob(std::string name, std::string bytes) { return {std::move(name), {}, std::move(bytes), true, false}; }
  size_t nbytes() const { return is_blob ? blob.size() : tensor.numel() * tensor.element_size(); }
};

// What a restore read, for Tracked::apply().
class RestoreContext {
 public:
  explicit RestoreContext(RestoreResult* result);
  int64_t step() const;
  // The checkpoint holds `name` (false only for optional entries and non-strict restores).
  bool has(const std::string& name) const;
  // The bytes of an entry read into owned memory (ExpectOwned / ExpectTensor of a non-direct tensor).
  std::string take_blob(const std::string& name);
  // An owned entry as a tensor that adopts its bytes (no copy). With `like`, dtype and shape are
  // checked first: kMismatch naming the entry.
  at::Tensor take_tensor(const std::string& name, const at::Tensor* like);
  // Brings `live` (expected with ExpectTensor) to the checkpoint's value: already written by the
  // store when it was a direct target, else copied from the owned bytes. No-op when absent.
  void restore_into(const std::string& name, at::Tensor& live);

 private:
  RestoreResult* r_;
  std::map<std::string, const TensorInfo*> index_;  // the checkpoint's entries by name
};

class Tracked {
 public:
  // When apply() runs relative to other kinds (snapshots follow the same order).
  enum class Stage {
    kObject = 0,      // modules, optimizers, samplers, extras
    kDependent = 1,   // kinds that read other objects' restored state (LR schedulers)
    kGenerators = 2,  // default generators, last: samplers may draw while being restored
  };

  explicit Tracked(std::string name) : name_(std::move(name)) {}
  virtual ~Tracked() = default;
  Tracked(const Tracked&) = delete;
  Tracked& operator=(const Tracked&) = delete;

  const std::string& name() const { return name_; }
  virtual Stage stage() const { return Stage::kObject; }
  virtual void collect(std::vector<Entry>* out) = 0;
  virtual void expect(std::vector<RestoreTarget>* out) = 0;
  virtual void apply(RestoreContext& ctx) = 0;

 protected:
  std::string entry(const std::string& suffix) const { return name_ + ":" + suffix; }

 private:
  std::string name_;
};

// A live tensor the store can write into directly: CPU, contiguous, non-empty, dense.
bool IsDirectTarget(const at::Tensor& t);
// Expects `live`'s entry back: straight into its memory when IsDirectTarget (the store checks
// dtype and shape), else into owned memory that RestoreContext::restore_into copies from.
void ExpectTensor(std::vector<RestoreTarget>* out, const std::string& name, const at::Tensor& live,
                  bool optional = false);
// Expects an entry whose size is not known before the restore (blobs, state not created yet).
void ExpectOwned(std::vector<RestoreTarget>* out, const std::string& name, bool optional = false);

// at::ScalarType <-> preempt::DType; throws Error (kInvalidArgument) for types the store cannot name.
DType ToDType(at::ScalarType t);
at::ScalarType ToScalarType(DType t);

// Cereal portable-binary bytes of `value`, and back; bytes that do not parse are kCorruption
// naming `entry_name`.
template <class T>
std::string ToCerealBytes(const T& value) {
  std::ostringstream os;
  {
    cereal::PortableBinaryOutputArchive ar(os);
    ar(value);
  }
  return std::move(os).str();
}
template <class T>
void FromCerealBytes(const std::string& bytes, const std::string& entry_name, T* value) {
  std::istringstream is(bytes);
  try {
    cereal::PortableBinaryInputArchive ar(is);
    ar(*value);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(Status(StatusCode::kCorruption, "restore: entry '" + entry_name + "' does not parse: " + e.what()));
  }
}

}  // namespace preempt::torch
