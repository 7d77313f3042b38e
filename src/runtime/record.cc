// The runtime's own checkpoint entry (see internal.h): portable binary (cereal), versioned.
#include <cereal/archives/portable_binary.hpp>
#include <cereal/types/vector.hpp>

#include <sstream>

#include "runtime/internal.h"

namespace preempt {

template <class Archive>
void serialize(Archive& ar, CostSample& s) {
  ar(s.bytes, s.drain_s, s.stall_s, s.persist_s);
}

namespace runtime_internal {
namespace {
constexpr uint32_t kRecordVersion = 1;
constexpr size_t kMaxCostSamples = 4096;  // a tracker's window is far smaller; bounds a hostile length
}  // namespace

std::string EncodeRecord(const Record& r) {
  std::ostringstream os;
  {
    cereal::PortableBinaryOutputArchive ar(os);
    ar(kRecordVersion, r.request_ack, static_cast<uint64_t>(r.costs.size()));
    for (const auto& c : r.costs) ar(c);
  }
  return std::move(os).str();
}

Status DecodeRecord(const std::string& bytes, Record* out) {
  const std::string what = std::string("checkpoint entry '") + kRecordEntry + "'";
  try {
    std::istringstream is(bytes);
    cereal::PortableBinaryInputArchive ar(is);
    uint32_t version = 0;
    uint64_t n = 0;
    ar(version);
    if (version != kRecordVersion) {
      return Status(StatusCode::kVersionMismatch, what + ": version " + std::to_string(version) + ", this build reads " +
                                                      std::to_string(kRecordVersion));
    }
    ar(out->request_ack, n);
    if (n > kMaxCostSamples) return Status(StatusCode::kCorruption, what + ": " + std::to_string(n) + " cost samples");
    out->costs.resize(n);
    for (auto& c : out->costs) ar(c);
  } catch (const std::exception& e) {
    return Status(StatusCode::kCorruption, what + ": " + e.what());
  }
  return Status::OK();
}

}  // namespace runtime_internal
}  // namespace preempt
