// preempt/coord_c10d.h — the coordinator's collective and drain over LibTorch c10d.
//
// C10dCollective<PG> works with anything that has `allreduce(std::vector<at::Tensor>&,
// const c10d::AllreduceOptions&)`, `getRank()`, `getSize()`: c10d::ProcessGroup
// (LibTorch 1.x and 2.x) and c10d::Backend such as ProcessGroupGloo / ProcessGroupNCCL in 2.x,
// which no longer derive from ProcessGroup. The template only adapts the call; all tensor work
// is in the library (src/coord/c10d.cc), so the 1.x/2.x difference stays in this one place.
//
// WorkDrain keeps the c10d::Work handles a trainer registers (e.g. its gradient all_reduce) and
// waits them with the stop deadline.
//
// The all-reduce runs on a tensor the library allocates (the Work holds a reference to it), never
// on the caller's memory: a collective abandoned at its deadline may complete later, when a slow
// peer joins, and must not write into a stack frame that is gone.
//
// Thread-safety: C10dCollective as the process group; WorkDrain is internally locked.
#pragma once

#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "preempt/coord.h"

namespace c10d {
class ProcessGroupGloo;
class Store;
}  // namespace c10d

namespace preempt {

using C10dAllreduceFn =
    std::function<c10::intrusive_ptr<c10d::Work>(std::vector<at::Tensor>&, const c10d::AllreduceOptions&)>;

// Waits one Work until `deadline`, or also until a stop deadline that appears while waiting
// (UntilStop::kYes). kDeadlineExceeded: not finished; kAborted: it failed.
Status WaitWork(const c10::intrusive_ptr<c10d::Work>& work, Deadline deadline, UntilStop until_stop,
                const std::string& what);

// Non-template core: does the all-reduce(MAX) over a CPU int64 tensor through `fn`.
class C10dCollectiveBase : public Collective {
 public:
  C10dCollectiveBase(int rank, int size, std::string name, C10dAllreduceFn allreduce);
  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  Status allreduce_max(int64_t* values, int n, Deadline deadline, UntilStop until_stop) override;
  std::unique_ptr<Pending> allreduce_max_async(const int64_t* values, int n) override;
  std::string name() const override { return name_; }

 private:
  int rank_, size_;
  std::string name_;
  C10dAllreduceFn allreduce_;
};

template <class PG>
class C10dCollective : public C10dCollectiveBase {
 public:
  explicit C10dCollective(c10::intrusive_ptr<PG> pg, std::string name = "c10d")
      : C10dCollectiveBase(
            pg->getRank(), pg->getSize(), std::move(name),
            [p = pg.get()](std::vector<at::Tensor>& t, const c10d::AllreduceOptions& o) { return p->allreduce(t, o); }),
        pg_(std::move(pg)) {}
  // Leaks one reference so the group's destructor (which joins its worker threads and waits for
  // queued work) never runs after a peer stopped answering.
  void abandon() override {
    if (pg_) (void)pg_.release();
  }

 private:
  c10::intrusive_ptr<PG> pg_;
};

template <class PG>
std::unique_ptr<Collective> MakeC10dCollective(c10::intrusive_ptr<PG> pg, std::string name = "c10d") {
  return std::make_unique<C10dCollective<PG>>(std::move(pg), std::move(name));
}

// Registered c10d Work handles, drained with a deadline. Completed handles are dropped on add().
class WorkDrain : public DrainSource {
 public:
  void add(c10::intrusive_ptr<c10d::Work> work, std::string what = "collective");
  // Waits every registered handle until `deadline` (the stop path); past it, aborts them.
  Status drain(Deadline deadline) override;
  // The trainer's wait before its optimizer step: no deadline of its own, but a stop signal that
  // arrives meanwhile bounds it by the stop deadline (then like drain()).
  Status wait_until_stop_deadline();
  std::string name() const override { return "c10d work"; }

 private:
  Status wait_all(Deadline deadline, UntilStop until_stop);
  std::mutex mu_;
  std::vector<std::pair<c10::intrusive_ptr<c10d::Work>, std::string>> works_;
};

#if defined(PREEMPT_HAVE_GLOO)
// Test/example helper: a gloo process group over loopback (127.0.0.1) rendezvousing through a
// c10d::FileStore at `store_path` (shared by all ranks; remove it before the first launch).
// Built only when LibTorch's gloo headers were found (PyTorch's pip wheels have none).
c10::intrusive_ptr<c10d::ProcessGroupGloo> MakeGlooGroup(const std::string& store_path, int rank, int size,
                                                         double timeout_s = 60);
#endif

}  // namespace preempt
