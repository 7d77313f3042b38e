// libFuzzer target: the manifest and COMMIT parsers must reject any input without crashing,
// hanging or allocating far beyond the input size. Half of the inputs get a valid envelope
// (correct length and checksum, once per format version read) so the fuzzer reaches the JSON
// parser and the validators, chunk locations (references to older steps) included.
#include <cstddef>
#include <cstdint>
#include <string>

#include "format/format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace preempt::format;
  std::string raw(reinterpret_cast<const char*>(data), size);
  Manifest m;
  (void)DecodeManifest(raw, "fuzz.manifest", UINT64_MAX, &m);
  (void)DecodeManifest(raw, "fuzz.manifest", 4096, &m);
  CommitRecord c;
  (void)DecodeCommit(raw, "COMMIT", &c);
  for (uint32_t v = kMinFormatVersion; v <= kFormatVersion; ++v) {
    const std::string tail = " " + std::to_string(size) + " " + Hex64(Hash64(data, size)) + "\n";
    Manifest m2;
    (void)DecodeManifest("preempt-manifest " + std::to_string(v) + tail + raw, "fuzz.manifest", UINT64_MAX, &m2);
    CommitRecord c2;
    (void)DecodeCommit("preempt-commit " + std::to_string(v) + tail + raw, "COMMIT", &c2);
  }
  return 0;
}
