// Tracked kind: a user value as an opaque blob (track_extra, track_blob, DataCursor).
#include <utility>

#include "torch/kinds.h"

namespace preempt::torch::internal {
namespace {

class TrackedBlob : public Tracked {
 public:
  TrackedBlob(std::string name, std::function<std::string()> save, std::function<void(const std::string&)> load)
      : Tracked(std::move(name)), save_(std::move(save)), load_(std::move(load)) {}

  void collect(std::vector<Entry>* out) override { out->push_back(Entry::Blob(name(), save_())); }
  void expect(std::vector<RestoreTarget>* out) override { ExpectOwned(out, name()); }
  void apply(RestoreContext& ctx) override {
    if (!ctx.has(name())) return;
    std::string bytes = ctx.take_blob(name());
    try {
      load_(bytes);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error(Status(StatusCode::kCorruption, "restore: entry '" + name() + "' does not load: " + e.what()));
    }
  }

 private:
  std::function<std::string()> save_;
  std::function<void(const std::string&)> load_;
};

}  // namespace

std::unique_ptr<Tracked> TrackBlob(const std::string& name, std::function<std::string()> save,
                                   std::function<void(const std::string&)> load) {
  return std::make_unique<TrackedBlob>(name, std::move(save), std::move(load));
}

}  // namespace preempt::torch::internal
