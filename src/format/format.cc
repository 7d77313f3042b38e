#include "format/format.h"

#include <xxhash.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>

#include <cereal/archives/json.hpp>
#include <cereal/types/map.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>

namespace preempt {

// Serialization of the public TensorInfo lives here so the public header stays cereal-free.
template <class Archive>
void save(Archive& ar, const TensorInfo& t) {
  ar(cereal::make_nvp("name", t.name), cereal::make_nvp("dtype", std::string(DTypeName(t.dtype))),
     cereal::make_nvp("shape", t.shape), cereal::make_nvp("offset", t.offset), cereal::make_nvp("nbytes", t.nbytes));
}

template <class Archive>
void load(Archive& ar, TensorInfo& t) {
  std::string dtype;
  ar(cereal::make_nvp("name", t.name), cereal::make_nvp("dtype", dtype), cereal::make_nvp("shape", t.shape),
     cereal::make_nvp("offset", t.offset), cereal::make_nvp("nbytes", t.nbytes));
  if (!DTypeFromName(dtype, &t.dtype)) throw cereal::Exception("tensor " + t.name + ": unknown dtype '" + dtype + "'");
}

bool IsValidEntryName(const std::string& name) {
  if (name.empty() || name.size() > 512 || name[0] == '.') return false;
  if (name.find("..") != std::string::npos) return false;
  for (unsigned char c : name) {
    if (isalnum(c)) continue;
    if (strchr("_.:@#+=,[]()-", c) == nullptr || c == 0) return false;
  }
  return true;
}

namespace format {

std::string RankDataName(int rank) {
  char buf[32];
  snprintf(buf, sizeof(buf), "rank-%05d.bin", rank);
  return buf;
}

std::string RankManifestName(int rank) {
  char buf[32];
  snprintf(buf, sizeof(buf), "rank-%05d.manifest", rank);
  return buf;
}

namespace {
const char* StepDirSuffix(StepDirKind kind) {
  switch (kind) {
    case StepDirKind::kCommitted: return "";
    case StepDirKind::kPartial: return ".tmp";
    case StepDirKind::kReplaced: return ".replaced.tmp";
    case StepDirKind::kRetired: return ".retired.tmp";
  }
  return "";
}
}  // namespace

std::string StepDirName(int64_t step, StepDirKind kind) {
  char buf[48];
  snprintf(buf, sizeof(buf), "step-%08" PRId64 "%s", step, StepDirSuffix(kind));
  return buf;
}

bool ParseStepDirName(const std::string& name, int64_t* step, StepDirKind* kind) {
  if (name.rfind("step-", 0) != 0) return false;
  size_t i = 5, digits = 0;
  int64_t v = 0;
  while (i < name.size() && isdigit(static_cast<unsigned char>(name[i]))) {
    if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) return false;
    v = v * 10 + (name[i] - '0');
    ++i;
    ++digits;
  }
  if (digits < 8) return false;
  const std::string rest = name.substr(i);
  for (StepDirKind k : {StepDirKind::kCommitted, StepDirKind::kPartial, StepDirKind::kReplaced, StepDirKind::kRetired}) {
    if (rest == StepDirSuffix(k)) {
      *step = v;
      *kind = k;
      return true;
    }
  }
  return false;
}

uint64_t Hash64(const void* data, size_t n) { return XXH3_64bits(data, n); }

std::string Hex64(uint64_t v) {
  char buf[17];
  snprintf(buf, sizeof(buf), "%016" PRIx64, v);
  return buf;
}

namespace {

std::string ShapeString(DType d, const std::vector<int64_t>& shape) {
  std::string s = DTypeName(d);
  s += "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// Checks that dtype, shape and nbytes agree. Empty message when they do.
std::string CheckEntryShape(DType dtype, const std::vector<int64_t>& shape, uint64_t nbytes) {
  if (shape.size() > kMaxDims) return "has " + std::to_string(shape.size()) + " dims (max 64)";
  if (dtype == DType::kBytes && shape.empty()) return "";
  int64_t n = NumElements(shape);
  if (n < 0) return "has a negative or overflowing shape";
  uint64_t want = static_cast<uint64_t>(n);
  uint64_t esize = DTypeSize(dtype);
  if (want > std::numeric_limits<uint64_t>::max() / esize || want * esize != nbytes) {
    return ShapeString(dtype, shape) + " needs " + std::to_string(want * esize) + " bytes, not " +
           std::to_string(nbytes);
  }
  return "";
}

// Envelope: "preempt-<kind> <version> <len> <hash>\n<payload>".
std::string Envelope(const std::string& kind, const std::string& payload) {
  std::string head = "preempt-" + kind + " " + std::to_string(kFormatVersion) + " " + std::to_string(payload.size()) +
                     " " + Hex64(Hash64(payload.data(), payload.size())) + "\n";
  return head + payload;
}

// Checks the envelope; *version is the one it declares (a version this build reads).
Status OpenEnvelope(const std::string& kind, const std::string& text, const std::string& file, std::string* payload,
                    uint32_t* version_out) {
  auto nl = text.find('\n');
  if (nl == std::string::npos || nl > 128) {
    return Status(StatusCode::kCorruption, file + ": header line missing or too long (truncated or not a preempt " + kind + ")");
  }
  std::string head = text.substr(0, nl);
  char magic[32] = {0};
  unsigned version = 0;
  unsigned long long len = 0;
  char hex[32] = {0};
  int n = sscanf(head.c_str(), "%31s %u %llu %31s", magic, &version, &len, hex);
  if (n != 4 || std::string(magic) != "preempt-" + kind) {
    return Status(StatusCode::kCorruption, file + ": header '" + head.substr(0, 60) + "' is not a preempt " + kind + " header");
  }
  if (version < kMinFormatVersion || version > kFormatVersion) {
    return Status(StatusCode::kVersionMismatch, file + ": field format_version is " + std::to_string(version) +
                                                   "; this build reads versions " + std::to_string(kMinFormatVersion) +
                                                   " to " + std::to_string(kFormatVersion));
  }
  *version_out = version;
  uint64_t have = text.size() - nl - 1;
  if (len != have) {
    return Status(StatusCode::kCorruption, file + ": payload is " + std::to_string(have) + " bytes, header says " +
                                               std::to_string(len) + " (truncated or extended)");
  }
  const char* body = text.data() + nl + 1;
  if (Hex64(Hash64(body, have)) != hex) {
    return Status(StatusCode::kCorruption, file + ": checksum mismatch (header " + hex + ", content " +
                                               Hex64(Hash64(body, have)) + ")");
  }
  // rapidjson parses recursively: refuse deep nesting before handing it the text. The JSON
  // reader hands strings on as C strings, so a NUL inside one (only expressible as the escape
  // \u0000) would silently cut it short: refuse it here, where the length is still known.
  int depth = 0;
  bool in_string = false, escape = false;
  for (uint64_t i = 0; i < have; ++i) {
    char c = body[i];
    if (in_string) {
      if (escape) {
        escape = false;
        if (c == 'u' && have - i > 4 && std::string(body + i + 1, 4) == "0000") {
          return Status(StatusCode::kCorruption, file + ": a string contains a NUL character (\\u0000 at byte " +
                                                     std::to_string(i - 1) + " of the payload)");
        }
      } else if (c == '\\') {
        escape = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    else if ((c == 'e' || c == 'E') && i > 0 && (isdigit(static_cast<unsigned char>(body[i - 1])) || body[i - 1] == '.')) {
      // Every number preempt writes is an integer; rapidjson's exact parser mishandles some
      // exponents (a zero significand with an exponent shifts by a garbage count).
      return Status(StatusCode::kCorruption, file + ": a number has an exponent (byte " + std::to_string(i) +
                                                 " of the payload); checkpoint files hold integers only");
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return Status(StatusCode::kCorruption, file + ": JSON nested deeper than 32 levels");
    } else if (c == ']' || c == '}') --depth;
  }
  payload->assign(body, have);
  return Status::OK();
}

template <class Fn>
Status ParseJson(const std::string& payload, const std::string& file, Fn&& fn) {
  try {
    std::istringstream in(payload);
    cereal::JSONInputArchive ar(in);
    fn(ar);
  } catch (const std::exception& e) {
    return Status(StatusCode::kCorruption, file + ": " + e.what());
  }
  return Status::OK();
}

}  // namespace

Status LayoutItems(const std::vector<SaveItem>& items, std::vector<TensorInfo>* out, uint64_t* data_bytes) {
  out->clear();
  out->reserve(items.size());
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& it : items) {
    if (!IsValidEntryName(it.name)) {
      return Status(StatusCode::kInvalidArgument, "item name '" + it.name.substr(0, 80) +
                                                      "' is not allowed (1..512 of [A-Za-z0-9_.:@#+=,[]()-], no '/' or '..')");
    }
    if (!seen.insert(it.name).second) return Status(StatusCode::kInvalidArgument, "item " + it.name + " appears twice");
    if (it.nbytes > 0 && it.data == nullptr) {
      return Status(StatusCode::kInvalidArgument, "item " + it.name + " has no data pointer");
    }
    std::string bad = CheckEntryShape(it.dtype, it.shape, it.nbytes);
    if (!bad.empty()) return Status(StatusCode::kInvalidArgument, "item " + it.name + ": " + bad);
    offset = AlignUp(offset, it.nbytes >= kPageAlignedTensorBytes ? kIoAlignment : kTensorAlignment);
    TensorInfo t;
    t.name = it.name;
    t.dtype = it.dtype;
    t.shape = it.shape;
    t.offset = offset;
    t.nbytes = it.nbytes;
    out->push_back(std::move(t));
    offset += it.nbytes;
  }
  *data_bytes = offset;
  return Status::OK();
}

uint64_t ChunkLength(const Manifest& m, uint64_t c) {
  return std::min<uint64_t>(m.chunk_bytes, m.data_bytes - c * m.chunk_bytes);
}

std::vector<int64_t> ReferencedSteps(const Manifest& m) {
  std::set<int64_t> steps;
  for (int64_t s : m.chunk_step)
    if (s != m.step) steps.insert(s);
  return std::vector<int64_t>(steps.begin(), steps.end());
}

std::string EncodeManifest(const Manifest& m) {
  std::ostringstream os;
  {
    cereal::JSONOutputArchive ar(os, cereal::JSONOutputArchive::Options::NoIndent());
    ar(cereal::make_nvp("schema", std::string("preempt.manifest/1")), cereal::make_nvp("format_version", kFormatVersion),
       cereal::make_nvp("step", m.step), cereal::make_nvp("rank", m.rank), cereal::make_nvp("world_size", m.world_size),
       cereal::make_nvp("created_unix_ms", m.created_unix_ms), cereal::make_nvp("data_file", m.data_file),
       cereal::make_nvp("chunk_bytes", m.chunk_bytes), cereal::make_nvp("data_bytes", m.data_bytes),
       cereal::make_nvp("file_bytes", m.file_bytes), cereal::make_nvp("tensors", m.tensors),
       cereal::make_nvp("chunk_xxh3", m.chunk_xxh3), cereal::make_nvp("chunk_step", m.chunk_step),
       cereal::make_nvp("chunk_offset", m.chunk_offset), cereal::make_nvp("metadata", m.metadata));
  }
  return Envelope("manifest", os.str());
}

namespace {

// Version 2 chunk locations: own chunks tile [0, file_bytes) exactly, each padded to 4 KiB (in
// any order); references name an older step at a 4 KiB-aligned offset whose end does not
// overflow. Whether the referenced file holds it is checked against the file system
// (store_internal::CheckReferences).
Status CheckChunkLocations(const Manifest& m, const std::string& file) {
  const uint64_t chunks = m.chunk_xxh3.size();
  auto bad = [&](const std::string& field, uint64_t c, const std::string& why) {
    return Status(StatusCode::kCorruption, file + ": field " + field + "[" + std::to_string(c) + "] " + why);
  };
  if (m.chunk_step.size() != chunks || m.chunk_offset.size() != chunks) {
    return Status(StatusCode::kCorruption, file + ": field chunk_step/chunk_offset has " + std::to_string(m.chunk_step.size()) +
                                               "/" + std::to_string(m.chunk_offset.size()) + " entries, expected " +
                                               std::to_string(chunks));
  }
  std::vector<std::pair<uint64_t, uint64_t>> own;  // (offset, chunk)
  for (uint64_t c = 0; c < chunks; ++c) {
    const uint64_t padded = AlignUp(ChunkLength(m, c), kMinChunkBytes);
    const int64_t s = m.chunk_step[c];
    const uint64_t off = m.chunk_offset[c];
    if (s == m.step) {
      own.emplace_back(off, c);
      continue;
    }
    if (s < 0 || s > m.step) {
      return bad("chunk_step", c, "is " + std::to_string(s) + "; a reference names an older step (0.." + std::to_string(m.step - 1) + ")");
    }
    if (off % kMinChunkBytes || off > std::numeric_limits<uint64_t>::max() - padded) {
      return bad("chunk_offset", c, "is " + std::to_string(off) + " (not 4 KiB-aligned or out of range)");
    }
  }
  std::sort(own.begin(), own.end());
  uint64_t own_end = 0;
  for (const auto& [off, c] : own) {
    if (off != own_end) {
      return bad("chunk_offset", c, "is " + std::to_string(off) + "; this step's chunks tile its data file, expected " +
                                        std::to_string(own_end));
    }
    own_end += AlignUp(ChunkLength(m, c), kMinChunkBytes);
  }
  if (m.file_bytes != own_end) {
    return Status(StatusCode::kCorruption, file + ": field file_bytes is " + std::to_string(m.file_bytes) +
                                               "; this step's chunks need " + std::to_string(own_end));
  }
  return Status::OK();
}

}  // namespace

Status DecodeManifest(const std::string& text, const std::string& file, uint64_t data_file_size, Manifest* m) {
  std::string payload;
  uint32_t version = 0;
  PREEMPT_RETURN_IF_ERROR(OpenEnvelope("manifest", text, file, &payload, &version));
  std::string schema;
  m->chunk_step.clear();
  m->chunk_offset.clear();
  PREEMPT_RETURN_IF_ERROR(ParseJson(payload, file, [&](cereal::JSONInputArchive& ar) {
    ar(cereal::make_nvp("schema", schema), cereal::make_nvp("format_version", m->format_version),
       cereal::make_nvp("step", m->step), cereal::make_nvp("rank", m->rank), cereal::make_nvp("world_size", m->world_size),
       cereal::make_nvp("created_unix_ms", m->created_unix_ms), cereal::make_nvp("data_file", m->data_file),
       cereal::make_nvp("chunk_bytes", m->chunk_bytes), cereal::make_nvp("data_bytes", m->data_bytes),
       cereal::make_nvp("file_bytes", m->file_bytes), cereal::make_nvp("tensors", m->tensors),
       cereal::make_nvp("chunk_xxh3", m->chunk_xxh3));
    if (version >= 2) ar(cereal::make_nvp("chunk_step", m->chunk_step), cereal::make_nvp("chunk_offset", m->chunk_offset));
    ar(cereal::make_nvp("metadata", m->metadata));
  }));
  auto bad = [&](const std::string& field, const std::string& why) {
    return Status(StatusCode::kCorruption, file + ": field " + field + " " + why);
  };
  if (schema != "preempt.manifest/1") return bad("schema", "is '" + schema.substr(0, 40) + "'");
  if (m->format_version != version) {
    return Status(StatusCode::kVersionMismatch, file + ": field format_version is " + std::to_string(m->format_version) +
                                                   " in a version " + std::to_string(version) + " envelope");
  }
  if (m->step < 0) return bad("step", "is negative");
  if (m->world_size < 1 || m->world_size > kMaxWorldSize) return bad("world_size", "is out of range");
  if (m->rank < 0 || m->rank >= m->world_size) return bad("rank", "is out of range");
  if (m->data_file != RankDataName(m->rank)) return bad("data_file", "is '" + m->data_file.substr(0, 60) + "'");
  if (m->chunk_bytes < kMinChunkBytes || m->chunk_bytes > kMaxChunkBytes || m->chunk_bytes % kMinChunkBytes) {
    return bad("chunk_bytes", "is " + std::to_string(m->chunk_bytes));
  }
  if (m->data_bytes > std::numeric_limits<uint64_t>::max() - kMaxChunkBytes) {
    return bad("data_bytes", "is " + std::to_string(m->data_bytes));
  }
  uint64_t chunks = (m->data_bytes + m->chunk_bytes - 1) / m->chunk_bytes;
  if (m->chunk_xxh3.size() != chunks) {
    return bad("chunk_xxh3", "has " + std::to_string(m->chunk_xxh3.size()) + " entries, expected " + std::to_string(chunks));
  }
  if (version == 1) {
    if (m->file_bytes != AlignUp(m->data_bytes, kMinChunkBytes)) {
      return bad("file_bytes", "is " + std::to_string(m->file_bytes) + " for data_bytes " + std::to_string(m->data_bytes));
    }
    m->chunk_step.assign(chunks, m->step);
    m->chunk_offset.resize(chunks);
    for (uint64_t c = 0; c < chunks; ++c) m->chunk_offset[c] = c * m->chunk_bytes;
  } else {
    PREEMPT_RETURN_IF_ERROR(CheckChunkLocations(*m, file));
  }
  if (data_file_size != std::numeric_limits<uint64_t>::max() && data_file_size != m->file_bytes) {
    return Status(StatusCode::kCorruption, file + ": data file " + m->data_file + " is " + std::to_string(data_file_size) +
                                               " bytes, manifest says " + std::to_string(m->file_bytes) + " (truncated?)");
  }
  std::set<std::string> names;
  uint64_t end_prev = 0;
  for (const auto& t : m->tensors) {
    if (!IsValidEntryName(t.name)) return bad("tensors[].name", "'" + t.name.substr(0, 60) + "' is not allowed");
    if (!names.insert(t.name).second) return bad("tensors[].name", "'" + t.name + "' appears twice");
    std::string why = CheckEntryShape(t.dtype, t.shape, t.nbytes);
    if (!why.empty()) return bad("tensors[" + t.name + "].shape", why);
    if (t.offset < end_prev) return bad("tensors[" + t.name + "].offset", "overlaps the previous tensor or is out of order");
    if (t.nbytes > m->data_bytes || t.offset > m->data_bytes - t.nbytes) {
      return bad("tensors[" + t.name + "].offset", std::to_string(t.offset) + "+" + std::to_string(t.nbytes) +
                                                        " lies beyond data_bytes " + std::to_string(m->data_bytes));
    }
    end_prev = t.offset + t.nbytes;
  }
  return Status::OK();
}

std::string EncodeCommit(const CommitRecord& c) {
  std::ostringstream os;
  {
    cereal::JSONOutputArchive ar(os, cereal::JSONOutputArchive::Options::NoIndent());
    ar(cereal::make_nvp("schema", std::string("preempt.commit/1")), cereal::make_nvp("format_version", kFormatVersion),
       cereal::make_nvp("step", c.step), cereal::make_nvp("world_size", c.world_size),
       cereal::make_nvp("created_unix_ms", c.created_unix_ms), cereal::make_nvp("manifest_xxh3", c.manifest_xxh3),
       cereal::make_nvp("referenced_steps", c.referenced_steps));
  }
  return Envelope("commit", os.str());
}

Status DecodeCommit(const std::string& text, const std::string& file, CommitRecord* c) {
  std::string payload;
  uint32_t version = 0;
  PREEMPT_RETURN_IF_ERROR(OpenEnvelope("commit", text, file, &payload, &version));
  std::string schema;
  c->referenced_steps.clear();
  PREEMPT_RETURN_IF_ERROR(ParseJson(payload, file, [&](cereal::JSONInputArchive& ar) {
    ar(cereal::make_nvp("schema", schema), cereal::make_nvp("format_version", c->format_version),
       cereal::make_nvp("step", c->step), cereal::make_nvp("world_size", c->world_size),
       cereal::make_nvp("created_unix_ms", c->created_unix_ms), cereal::make_nvp("manifest_xxh3", c->manifest_xxh3));
    if (version >= 2) ar(cereal::make_nvp("referenced_steps", c->referenced_steps));
  }));
  if (schema != "preempt.commit/1") return Status(StatusCode::kCorruption, file + ": field schema is '" + schema.substr(0, 40) + "'");
  if (c->format_version != version) {
    return Status(StatusCode::kVersionMismatch, file + ": field format_version is " + std::to_string(c->format_version) +
                                                   " in a version " + std::to_string(version) + " envelope");
  }
  if (c->world_size < 1 || c->world_size > kMaxWorldSize) return Status(StatusCode::kCorruption, file + ": field world_size is out of range");
  if (c->manifest_xxh3.size() != static_cast<size_t>(c->world_size)) {
    return Status(StatusCode::kCorruption, file + ": field manifest_xxh3 has " + std::to_string(c->manifest_xxh3.size()) +
                                               " entries for world_size " + std::to_string(c->world_size));
  }
  for (size_t i = 0; i < c->referenced_steps.size(); ++i) {
    const int64_t s = c->referenced_steps[i];
    if (s < 0 || s >= c->step || (i > 0 && s <= c->referenced_steps[i - 1])) {
      return Status(StatusCode::kCorruption, file + ": field referenced_steps[" + std::to_string(i) + "] is " +
                                                 std::to_string(s) + " (older steps, ascending, expected)");
    }
  }
  return Status::OK();
}

std::string TensorsInRange(const Manifest& m, uint64_t begin, uint64_t end) {
  std::string out;
  int listed = 0, more = 0;
  for (const auto& t : m.tensors) {
    if (t.offset < end && t.offset + t.nbytes > begin) {
      if (listed < 4) out += (listed++ ? ", " : "") + t.name;
      else ++more;
    }
  }
  if (more) out += " and " + std::to_string(more) + " more";
  return out.empty() ? "(padding)" : out;
}

}  // namespace format
}  // namespace preempt
