// format — the on-disk layout of a checkpoint, and the parsers that read it back.
//
// Every file preempt writes for a checkpoint carries an envelope line
//   "preempt-<kind> <format_version> <payload_bytes> <xxh3_hex>\n" followed by a JSON payload
// (cereal), so a flipped byte or a truncation is detected before anything is parsed, and
// parsed values are validated against the data file before any of them is used.
//
// A manifest of format version 2 says, per chunk, where its bytes live: in this step's own data
// file, or in the same rank's data file of an older committed step (a reference, written when
// the chunk was unchanged since that step). References always name the step that wrote the
// bytes, never another reference, so reading a chunk takes one hop. Version 1 manifests (no
// locations: every chunk in the own file at chunk index x chunk_bytes) are still read.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "preempt/checkpoint_entry.h"
#include "preempt/status.h"

namespace preempt::format {

inline constexpr uint32_t kFormatVersion = 2;     // written by this build
inline constexpr uint32_t kMinFormatVersion = 1;  // oldest version this build reads
inline constexpr uint64_t kMaxManifestBytes = 64ull << 20;
inline constexpr uint64_t kMaxCommitBytes = 1ull << 20;
inline constexpr uint64_t kTensorAlignment = 64;   // tensors start on cache-line offsets
// Tensors of at least this many bytes start on 4 KiB offsets, so that a chunk inside one of them
// held in page-aligned memory (staging) can be written from there without a copy. Readers take
// offsets from the manifest; any order-preserving, non-overlapping layout restores.
inline constexpr uint64_t kPageAlignedTensorBytes = 64 << 10;
inline constexpr uint64_t kMinChunkBytes = 4096;
inline constexpr uint64_t kMaxChunkBytes = 1ull << 30;
inline constexpr int kMaxWorldSize = 1 << 20;
inline constexpr size_t kMaxDims = 64;
inline constexpr int kMaxJsonDepth = 32;

struct Manifest {
  uint32_t format_version = kFormatVersion;
  int64_t step = 0;
  int rank = 0;
  int world_size = 1;
  int64_t created_unix_ms = 0;
  std::string data_file;              // "rank-00000.bin"
  uint64_t chunk_bytes = 0;
  uint64_t data_bytes = 0;            // logical bytes covered by chunks
  // Size of this step's data file: its own chunks in chunk order, each padded to 4 KiB (version 1
  // and checkpoints without references: data_bytes rounded up to 4 KiB).
  uint64_t file_bytes = 0;
  std::vector<uint64_t> chunk_xxh3;   // one per chunk of chunk_bytes (the last may be shorter)
  // Where chunk c lives: the data file of step chunk_step[c] (this rank's), at byte chunk_offset[c].
  // chunk_step[c] == step: this step's own data file. Always filled once decoded.
  std::vector<int64_t> chunk_step;
  std::vector<uint64_t> chunk_offset;
  std::vector<TensorInfo> tensors;    // sorted by offset
  std::map<std::string, std::string> metadata;
};

struct CommitRecord {
  uint32_t format_version = kFormatVersion;
  int64_t step = 0;
  int world_size = 1;
  int64_t created_unix_ms = 0;
  std::vector<uint64_t> manifest_xxh3;  // indexed by rank
  // Every older step whose data some rank's manifest references, ascending (version 1: none).
  // Retention keeps these steps while this checkpoint is kept.
  std::vector<int64_t> referenced_steps;
};

// Bytes of chunk `c` (the last chunk may be shorter than chunk_bytes). c < chunk count.
uint64_t ChunkLength(const Manifest& m, uint64_t c);
// True when chunk `c` lives in this step's own data file.
inline bool IsOwnChunk(const Manifest& m, uint64_t c) { return m.chunk_step[c] == m.step; }
// The distinct older steps the manifest references, ascending.
std::vector<int64_t> ReferencedSteps(const Manifest& m);

std::string RankDataName(int rank);      // "rank-00000.bin"
std::string RankManifestName(int rank);  // "rank-00000.manifest"
inline constexpr const char* kCommitName = "COMMIT";
inline constexpr const char* kLatestName = "LATEST";

// What a step directory name says about its content.
enum class StepDirKind {
  kCommitted,  // "step-00001200": committed (valid if its COMMIT and manifests check out)
  kPartial,    // "step-00001200.tmp": being written, or left by a crash
  kReplaced,   // "step-00001200.replaced.tmp": the previous copy while a step is re-saved
  kRetired,    // "step-00001200.retired.tmp": taken out of the committed namespace, being deleted
};
// "step-00001200" plus the suffix of `kind`. Steps are >= 0.
std::string StepDirName(int64_t step, StepDirKind kind = StepDirKind::kCommitted);
// The inverse of StepDirName; false for any other name.
bool ParseStepDirName(const std::string& name, int64_t* step, StepDirKind* kind);

uint64_t Hash64(const void* data, size_t n);
std::string Hex64(uint64_t v);

// Lays items out in a data file: offsets 64-byte aligned, in the given order.
// Fails (kInvalidArgument, naming the item) on bad names, duplicates, or dtype/shape/size disagreement.
Status LayoutItems(const std::vector<SaveItem>& items, std::vector<TensorInfo>* out, uint64_t* data_bytes);

std::string EncodeManifest(const Manifest& m);
// Parses and validates. `file` names the file in errors. When `data_file_size` is not
// UINT64_MAX it must equal m.file_bytes. Never allocates more than a small multiple of text.size().
Status DecodeManifest(const std::string& text, const std::string& file, uint64_t data_file_size, Manifest* m);

std::string EncodeCommit(const CommitRecord& c);
Status DecodeCommit(const std::string& text, const std::string& file, CommitRecord* c);

// The names of tensors overlapping bytes [begin, end) of the data file (for error messages).
std::string TensorsInRange(const Manifest& m, uint64_t begin, uint64_t end);

}  // namespace preempt::format
