// store/root_entries.h — what the store itself keeps in a checkpoint root, for callers that must
// tell a checkpoint root from a directory holding something else (the Python package refuses
// to write checkpoints into the latter).
#pragma once

#include <string>

namespace preempt {

// True for a name the store keeps in a root: step directories in any state (committed, partial,
// being replaced or retired), LATEST and its temporaries, the writers' locks.
bool IsStoreRootEntry(const std::string& name);

}  // namespace preempt
