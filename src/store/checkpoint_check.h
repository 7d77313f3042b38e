// checkpoint_check — the one validity check of a committed checkpoint directory, used by restore,
// Store::list, Store::ListCheckpoints, Store::Verify and therefore preempt-ckpt alike.
//
// A directory of step N is valid for a rank when: its name says step N; COMMIT is a regular file
// that parses and records step N; the rank's manifest is a regular file whose checksum equals the
// one in COMMIT, that parses, and whose step/rank/world_size agree with the directory and COMMIT;
// the rank's data file has the size the manifest records; every chunk the manifest references in
// an older step lies in a committed step directory listed in COMMIT's referenced_steps, inside
// that step's data file of the same rank. Data checksums are not read here.
//
// Thread-safety: pure functions over the file system.
#pragma once

#include <cstdint>
#include <string>

#include "format/format.h"
#include "preempt/fs.h"
#include "preempt/status.h"

namespace preempt::store_internal {

// Reads COMMIT of the directory of `step`. `world_size` > 0: a different world size is kMismatch.
Status CheckCommit(FileSystem* fs, const std::string& dir, int64_t step, int world_size, format::CommitRecord* c);

// Checks one rank's manifest and data file size. `c` (may be null: not committed) supplies the
// manifest checksum and world size to compare with.
Status CheckRank(FileSystem* fs, const std::string& dir, int64_t step, int rank, const format::CommitRecord* c,
                 format::Manifest* m);

// The reference part of CheckRank: `m` (of the manifest at `manifest_path` in `dir`) references
// only committed older steps whose data files hold the referenced bytes, and, when `c` is given,
// only steps listed in c->referenced_steps. Corruption names the manifest and the field.
Status CheckReferences(FileSystem* fs, const std::string& dir, const std::string& manifest_path, const format::Manifest& m,
                       const format::CommitRecord* c);

// The data file holding chunk `c` of `m`, a manifest read from the step directory `dir`.
std::string ChunkFilePath(const std::string& dir, const format::Manifest& m, uint64_t c);

// "chunk 3", or for a chunk stored in an older step's data file "chunk 3 of step 20 (at offset 8192)".
std::string ChunkLabel(const format::Manifest& m, uint64_t c);

// CheckCommit, then CheckRank for `rank`, or for every rank of COMMIT when rank < 0 (`*bytes`:
// the sum of their data bytes; `*written_bytes`: of their own data files). kMismatch only for a
// world-size difference.
Status CheckCheckpoint(FileSystem* fs, const std::string& dir, int64_t step, int rank, int world_size,
                       format::CommitRecord* c, format::Manifest* m, uint64_t* bytes, uint64_t* written_bytes = nullptr);

}  // namespace preempt::store_internal
