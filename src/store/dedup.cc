// Store deduplication: which checkpoint a save may reference, the reference check before COMMIT,
// and retention that keeps every step a kept checkpoint references.
#include <set>

#include "preempt/log.h"
#include "store/checkpoint_check.h"
#include "store/store_impl.h"

namespace preempt {

using format::CommitRecord;
using format::Manifest;

Status Store::Impl::find_dedup_base(int64_t step, const Manifest** base) {
  *base = nullptr;
  if (!o_.dedup) return Status::OK();
  std::vector<int64_t> steps;
  PREEMPT_RETURN_IF_ERROR(committed_steps(&steps));
  auto older = std::find_if(steps.begin(), steps.end(), [&](int64_t s) { return s < step; });
  if (older == steps.end()) return Status::OK();
  const int64_t prev = *older;
  const std::string dir = JoinPath(o_.root, format::StepDirName(prev));
  const std::string mp = JoinPath(dir, format::RankManifestName(o_.rank));
  CommitRecord c;
  Status s = store_internal::CheckCommit(fs_, dir, prev, o_.world_size, &c);
  if (s.ok() && base_cache_.step == prev && c.manifest_xxh3[o_.rank] == base_cache_.manifest_xxh3) {
    // The manifest is the one cached; what it describes on disk is checked again.
    const Manifest& m = base_cache_.manifest;
    std::unique_ptr<File> f;
    uint64_t size = 0;
    s = fs_->open(JoinPath(dir, m.data_file), OpenOptions{}, &f);
    if (s.ok()) s = f->size(&size);
    if (f) (void)f->close();
    if (s.ok() && size != m.file_bytes) {
      s = Status(StatusCode::kCorruption, JoinPath(dir, m.data_file) + " is " + std::to_string(size) + " bytes, manifest says " +
                                              std::to_string(m.file_bytes) + " (truncated?)");
    }
    if (s.ok()) s = store_internal::CheckReferences(fs_, dir, mp, m, &c);
  } else if (s.ok()) {
    base_cache_.step = -1;
    s = store_internal::CheckRank(fs_, dir, prev, o_.rank, &c, &base_cache_.manifest);
    if (s.ok()) {
      base_cache_.step = prev;
      base_cache_.manifest_xxh3 = c.manifest_xxh3[o_.rank];
    }
  }
  if (!s.ok()) {
    PREEMPT_LOG_WARN("checkpoint step %lld: every chunk is written (step %lld cannot be referenced: %s)",
                     static_cast<long long>(step), static_cast<long long>(prev), s.message().c_str());
    return Status::OK();
  }
  *base = &base_cache_.manifest;
  return Status::OK();
}

Status Store::Impl::check_references_for_commit(const std::string& tmp_dir, int64_t step, CommitRecord* c) {
  std::set<int64_t> referenced;
  for (int r = 0; r < o_.world_size; ++r) {
    std::string text;
    const std::string mp = JoinPath(tmp_dir, format::RankManifestName(r));
    PREEMPT_RETURN_IF_ERROR(fs_->read_file(mp, format::kMaxManifestBytes, &text));
    c->manifest_xxh3.push_back(format::Hash64(text.data(), text.size()));
    Manifest m;
    PREEMPT_RETURN_IF_ERROR(format::DecodeManifest(text, mp, UINT64_MAX, &m));
    if (m.step != step || m.rank != r) {
      return Status(StatusCode::kCorruption, mp + ": field step/rank is " + std::to_string(m.step) + "/" +
                                                 std::to_string(m.rank) + " in the directory of step " + std::to_string(step));
    }
    // Nothing deletes committed steps meanwhile: retention and rewind run on this thread.
    PREEMPT_RETURN_IF_ERROR(store_internal::CheckReferences(fs_, tmp_dir, mp, m, nullptr));
    for (int64_t s : format::ReferencedSteps(m)) referenced.insert(s);
  }
  c->referenced_steps.assign(referenced.begin(), referenced.end());
  return Status::OK();
}

Status Store::Impl::plan_retention(int64_t newest, std::vector<int64_t>* retire_steps) {
  retire_steps->clear();
  std::vector<int64_t> steps;
  PREEMPT_RETURN_IF_ERROR(committed_steps(&steps));
  // Newest first: a step's references are known before the older steps they name are decided.
  std::set<int64_t> referenced;
  bool unknown = false;  // a kept step whose references cannot be read: keep everything older
  int kept = 0;
  for (int64_t step : steps) {
    bool keep = step > newest;  // never delete a newer checkpoint than the one just written
    if (step == newest || kept < o_.keep_last) {
      ++kept;
      keep = true;
    }
    if (!keep && referenced.count(step)) {
      PREEMPT_LOG_INFO("retention: keeping step %lld: a newer kept checkpoint references its data", static_cast<long long>(step));
      keep = true;
    }
    if (!keep) {
      if (!unknown) retire_steps->push_back(step);
      continue;
    }
    CommitRecord c;
    Status s = store_internal::CheckCommit(fs_, JoinPath(o_.root, format::StepDirName(step)), step, 0, &c);
    if (!s.ok()) {
      if (!unknown) PREEMPT_LOG_WARN("retention: keeping every step older than %lld: %s", static_cast<long long>(step), s.message().c_str());
      unknown = true;
      continue;
    }
    referenced.insert(c.referenced_steps.begin(), c.referenced_steps.end());
  }
  return Status::OK();
}

}  // namespace preempt
