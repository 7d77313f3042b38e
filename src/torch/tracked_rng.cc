// Tracked kind: the default CPU generator and every CUDA device's default generator ("rng").
#include <cstring>
#include <mutex>

#include <ATen/Context.h>
#include <ATen/CPUGeneratorImpl.h>

#include "torch/kinds.h"
#include "torch/staging.h"

namespace preempt::torch::internal {
namespace {

class TrackedGenerators : public Tracked {
 public:
  TrackedGenerators() : Tracked("rng") {}
  Stage stage() const override { return Stage::kGenerators; }

  void collect(std::vector<Entry>* out) override {
    for (auto& [n, g] : generators()) {
      at::Tensor st;
      {
        std::lock_guard<std::mutex> lock(g.mutex());
        st = g.get_state();
      }
      out->push_back(Entry::Blob(entry(n), std::string(reinterpret_cast<const char*>(st.data_ptr()),
                                                       st.numel() * st.element_size())));
    }
  }
  void expect(std::vector<RestoreTarget>* out) override {
    for (auto& [n, g] : generators()) ExpectOwned(out, entry(n));
  }
  void apply(RestoreContext& ctx) override {
    for (auto& [n, g] : generators()) {
      if (!ctx.has(entry(n))) continue;
      std::string bytes = ctx.take_blob(entry(n));
      at::Tensor st = at::empty({static_cast<int64_t>(bytes.size())}, at::TensorOptions().dtype(at::kByte));
      std::memcpy(st.data_ptr(), bytes.data(), bytes.size());
      try {
        std::lock_guard<std::mutex> lock(g.mutex());
        g.set_state(st);
      } catch (const c10::Error& e) {
        throw Error(Status(StatusCode::kMismatch, "restore: entry '" + entry(n) + "': generator refused its state: " +
                                                      e.what_without_backtrace()));
      }
    }
  }

 private:
  static std::vector<std::pair<std::string, at::Generator>> generators() {
    std::vector<std::pair<std::string, at::Generator>> out;
    out.emplace_back("cpu", at::detail::getDefaultCPUGenerator());
    const int n = CudaDevices();
    for (int d = 0; d < n; ++d)
      out.emplace_back("cuda." + std::to_string(d),
                       at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(d))));
    return out;
  }
};

}  // namespace

std::unique_ptr<Tracked> TrackDefaultGenerators() { return std::make_unique<TrackedGenerators>(); }

}  // namespace preempt::torch::internal
