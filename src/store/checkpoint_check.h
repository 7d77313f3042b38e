// checkpoint_check — the one validity check of a committed checkpoint directory, used by restore,
// Store::list, Store::ListCheckpoints, Store::Verify and therefore preempt-ckpt alike.
//
// A directory of step N is valid for a rank when: its name says step N; COMMIT is a regular file
// that parses and records step N; the rank's manifest is a regular file whose checksum equals the
// one in COMMIT, that parses, and whose step/rank/world_size agree with the directory and COMMIT;
// the rank's data file has the size the manifest records. Data checksums are not read here.
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

// CheckCommit, then CheckRank for `rank`, or for every rank of COMMIT when rank < 0 (`*bytes`:
// the sum of their data bytes). kMismatch only for a world-size difference.
Status CheckCheckpoint(FileSystem* fs, const std::string& dir, int64_t step, int rank, int world_size,
                       format::CommitRecord* c, format::Manifest* m, uint64_t* bytes);

}  // namespace preempt::store_internal
