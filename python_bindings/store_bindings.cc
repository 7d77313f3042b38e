// preempt._C.Store / SaveHandle / Buffer — the checkpoint store for Python.
//
// Tensors cross as (name, dtype, shape, address, nbytes): the Python layer passes
// `tensor.data_ptr()` of CPU-contiguous tensors or of views into a Buffer, and keeps those objects
// alive through the handle (`keepalive`) until the save is done. Every call that waits on disk or
// on other ranks releases the GIL.
#include <pybind11/stl.h>

#include <cmath>
#include <memory>
#include <optional>

#include "bindings.h"
#include "preempt/store.h"
#include "staged_save.h"
#include "store/root_entries.h"

namespace preempt::python {
namespace {

// Aligned, pre-faulted host memory exposed through the buffer protocol (torch.frombuffer views it
// without a copy). Staging for snapshots and the destination of restored entries without a target.
class PyBuffer {
 public:
  explicit PyBuffer(AlignedBuffer b) : buf_(std::move(b)) {}
  size_t nbytes() const { return buf_.size(); }
  uintptr_t address() { return reinterpret_cast<uintptr_t>(buf_.data()); }
  py::buffer_info info() {
    // A zero-length buffer still needs a valid pointer for the buffer protocol.
    static uint8_t empty = 0;
    uint8_t* p = buf_.size() ? buf_.data() : &empty;
    return py::buffer_info(p, 1, py::format_descriptor<uint8_t>::format(), 1,
                           {static_cast<py::ssize_t>(buf_.size())}, {1}, /*readonly=*/false);
  }

 private:
  AlignedBuffer buf_;
};

std::shared_ptr<PyBuffer> NewBuffer(size_t nbytes, bool prefault) {
  AlignedBuffer b;
  {
    py::gil_scoped_release nogil;  // pre-faulting gigabytes takes a while
    try {
      b = AlignedBuffer(nbytes, prefault);
    } catch (const std::bad_alloc&) {
      b = AlignedBuffer();
      nbytes = SIZE_MAX;
    }
  }
  if (nbytes == SIZE_MAX) RaiseStatus(Status(StatusCode::kNoSpace, "Buffer: cannot allocate the requested bytes"));
  return std::make_shared<PyBuffer>(std::move(b));
}

// One (name, dtype, shape, address, nbytes) tuple; checks that the bytes agree with dtype × shape.
struct Entry {
  std::string name;
  DType dtype = DType::kBytes;
  std::vector<int64_t> shape;
  uintptr_t address = 0;
  size_t nbytes = 0;
};

Entry ParseEntry(const py::handle& h, const char* what) {
  auto t = py::reinterpret_borrow<py::tuple>(h);
  if (t.size() != 5) RaiseInvalid(std::string(what) + ": each entry is (name, dtype, shape, address, nbytes)");
  Entry e;
  e.name = t[0].cast<std::string>();
  e.dtype = ParseDType(t[1].cast<std::string>(), std::string(what) + " entry '" + e.name + "'");
  e.shape = t[2].cast<std::vector<int64_t>>();
  e.address = t[3].cast<uintptr_t>();
  e.nbytes = t[4].cast<size_t>();
  if (!IsValidEntryName(e.name)) RaiseInvalid(std::string(what) + ": invalid entry name '" + e.name + "'");
  if (e.nbytes > 0 && e.address == 0) RaiseInvalid(std::string(what) + " entry '" + e.name + "': null address");
  if (e.dtype != DType::kBytes) {
    const int64_t n = NumElements(e.shape);
    if (n < 0 || static_cast<uint64_t>(n) * DTypeSize(e.dtype) != e.nbytes)
      RaiseInvalid(std::string(what) + " entry '" + e.name + "': " + std::to_string(e.nbytes) +
                   " bytes do not match its dtype and shape");
  }
  return e;
}

IoBackend ParseBackend(const std::string& s) {
  if (s == "auto") return IoBackend::kAuto;
  if (s == "uring") return IoBackend::kUring;
  if (s == "posix") return IoBackend::kPosix;
  RaiseInvalid("Store: io_backend must be 'auto', 'uring' or 'posix', not '" + s + "'");
}

DirectIo ParseDirect(const std::string& s) {
  if (s == "auto") return DirectIo::kAuto;
  if (s == "on") return DirectIo::kOn;
  if (s == "off") return DirectIo::kOff;
  RaiseInvalid("Store: direct_io must be 'auto', 'on' or 'off', not '" + s + "'");
}

Deadline DeadlineFrom(std::optional<double> timeout_s) {
  if (!timeout_s) return Deadline::Never();
  if (std::isnan(*timeout_s) || *timeout_s < 0) RaiseInvalid("timeout_s must be >= 0");
  return Deadline::InSeconds(*timeout_s);
}

// A running save. Holds the Python objects whose memory it writes until it is done; dropping the
// last reference to an unfinished handle waits for the save (the memory must outlive it).
class PySaveHandle {
 public:
  PySaveHandle(std::shared_ptr<SaveHandle> h, py::object keepalive, std::shared_ptr<StagedSave> staged = nullptr)
      : h_(std::move(h)), keepalive_(std::move(keepalive)), staged_(std::move(staged)) {}
  ~PySaveHandle() {
    if (h_ && !h_->done()) {
      py::gil_scoped_release nogil;
      (void)h_->wait();
    }
  }
  int64_t step() const { return h_->step(); }
  bool done() const { return h_->done(); }
  // True once committed; False when the timeout passed first; raises the save's error.
  bool wait(std::optional<double> timeout_s) {
    Deadline d = DeadlineFrom(timeout_s);
    Status s;
    {
      py::gil_scoped_release nogil;
      s = h_->wait(d);
    }
    if (s.code() == StatusCode::kDeadlineExceeded && !h_->done()) return false;
    RaiseIfError(s);
    return true;
  }
  // Raises the first error so far; never blocks.
  void check() const {
    Status s = h_->status();
    RaiseIfError(s);
  }
  py::object error() const {
    Status s = h_->status();
    if (s.ok()) return py::none();
    return py::make_tuple(StatusCodeName(s.code()), s.message());
  }
  py::dict stats() const {
    SaveStats st = h_->stats();
    py::dict d;
    d["bytes"] = st.bytes;
    d["written_bytes"] = st.written_bytes;
    d["referenced_bytes"] = st.referenced_bytes;
    d["from_items_bytes"] = st.from_items_bytes;
    d["queued_s"] = st.queued_s;
    d["write_s"] = st.write_s;
    d["sync_s"] = st.sync_s;
    d["commit_s"] = st.commit_s;
    d["total_s"] = st.total_s;
    d["backend"] = st.backend;
    return d;
  }
  // True once the bytes are in staging (at once for a save without a background copy).
  bool staged() const { return !staged_ || staged_->staged(); }
  // Without the GIL: copies the rest alongside the background thread (see staged_save.h).
  bool wait_staged(std::optional<double> timeout_s) {
    if (!staged_) return true;
    Deadline d = DeadlineFrom(timeout_s);
    py::gil_scoped_release nogil;
    return staged_->wait_staged(d);
  }
  std::shared_ptr<SaveHandle> h_;
  py::object keepalive_;
  std::shared_ptr<StagedSave> staged_;  // null: the bytes were staged before the handle existed
};

class PyStore {
 public:
  explicit PyStore(StoreOptions o) : store_(std::make_unique<Store>(std::move(o))) {}
  ~PyStore() { close(); }
  void close() {
    if (!store_) return;
    py::gil_scoped_release nogil;  // waits for queued saves
    wait_submitted();
    store_.reset();
  }
  // Staged saves reach the store in creation order; a direct save must not overtake them either.
  std::shared_ptr<DeferredSaveHandle> exchange_last_staged(std::shared_ptr<DeferredSaveHandle> h) {
    std::swap(h, last_staged_);
    return h;
  }
  void wait_submitted() {  // call without the GIL
    if (last_staged_) last_staged_->wait_submitted();
  }
  Store& get() {
    if (!store_) RaiseInvalid("Store: used after close()");
    return *store_;
  }

 private:
  std::unique_ptr<Store> store_;
  std::shared_ptr<DeferredSaveHandle> last_staged_;
};

std::unique_ptr<PyStore> MakeStore(const std::string& root, int rank, int world_size, int keep_last,
                                   size_t chunk_bytes, int queue_depth, const std::string& io_backend,
                                   const std::string& direct_io, double commit_timeout_s, bool dedup,
                                   bool write_from_items, bool read_into_targets, int read_queue_depth) {
  if (root.empty()) RaiseInvalid("Store: root must not be empty");
  if (world_size < 1) RaiseInvalid("Store: world_size must be >= 1, not " + std::to_string(world_size));
  if (rank < 0 || rank >= world_size)
    RaiseInvalid("Store: rank " + std::to_string(rank) + " is outside [0, " + std::to_string(world_size) + ")");
  if (keep_last < 1) RaiseInvalid("Store: keep_last must be >= 1, not " + std::to_string(keep_last));
  if (chunk_bytes == 0 || chunk_bytes % kIoAlignment != 0)
    RaiseInvalid("Store: chunk_bytes must be a positive multiple of 4096, not " + std::to_string(chunk_bytes));
  if (queue_depth < 1) RaiseInvalid("Store: queue_depth must be >= 1, not " + std::to_string(queue_depth));
  if (read_queue_depth < 1 || read_queue_depth > 256)
    RaiseInvalid("Store: read_queue_depth must be in [1, 256], not " + std::to_string(read_queue_depth));
  if (!(commit_timeout_s > 0)) RaiseInvalid("Store: commit_timeout_s must be > 0");
  StoreOptions o;
  o.root = root;
  o.rank = rank;
  o.world_size = world_size;
  o.keep_last = keep_last;
  o.chunk_bytes = chunk_bytes;
  o.queue_depth = queue_depth;
  o.io_backend = ParseBackend(io_backend);
  o.direct_io = ParseDirect(direct_io);
  o.commit_timeout_s = commit_timeout_s;
  o.dedup = dedup;
  o.write_from_items = write_from_items;
  o.read_into_targets = read_into_targets;
  o.read_queue_depth = read_queue_depth;
  return std::make_unique<PyStore>(std::move(o));
}

SaveRequest MakeRequest(int64_t step, const py::list& items, const std::map<std::string, std::string>& metadata) {
  if (step < 0) RaiseInvalid("save: step must be >= 0, not " + std::to_string(step));
  SaveRequest req;
  req.step = step;
  req.metadata = metadata;
  req.items.reserve(items.size());
  for (const auto& h : items) {
    Entry e = ParseEntry(h, "save");
    SaveItem it;
    it.name = std::move(e.name);
    it.dtype = e.dtype;
    it.shape = std::move(e.shape);
    it.data = reinterpret_cast<const void*>(e.address);
    it.nbytes = e.nbytes;
    req.items.push_back(std::move(it));
  }
  return req;
}

std::shared_ptr<PySaveHandle> SaveAsync(PyStore& self, int64_t step, const py::list& items,
                                        const std::map<std::string, std::string>& metadata, py::object keepalive) {
  SaveRequest req = MakeRequest(step, items, metadata);
  Store& store = self.get();
  std::shared_ptr<SaveHandle> h;
  {
    py::gil_scoped_release nogil;  // save_async may wait for a free slot in the store's queue
    self.wait_submitted();
    h = store.save_async(std::move(req));
  }
  return std::make_shared<PySaveHandle>(std::move(h), std::move(keepalive));
}

// save_async after (src, dst, nbytes) copies into the staging memory the items point to, made by
// a background thread (the GIL is not needed for it); see staged_save.h.
std::shared_ptr<PySaveHandle> SaveStaged(PyStore& self, int64_t step, const py::list& copies, const py::list& items,
                                         const std::map<std::string, std::string>& metadata, py::object keepalive) {
  SaveRequest req = MakeRequest(step, items, metadata);
  std::vector<CopyRange> cs;
  cs.reserve(copies.size());
  for (const auto& h : copies) {
    auto t = py::reinterpret_borrow<py::tuple>(h);
    if (t.size() != 3) RaiseInvalid("save_staged: each copy is (source address, staging address, nbytes)");
    CopyRange c{reinterpret_cast<const void*>(t[0].cast<uintptr_t>()), reinterpret_cast<void*>(t[1].cast<uintptr_t>()),
                  t[2].cast<size_t>()};
    if (c.nbytes > 0 && (c.src == nullptr || c.dst == nullptr)) RaiseInvalid("save_staged: a copy has a null address");
    cs.push_back(c);
  }
  Store& store = self.get();
  auto staged = std::make_shared<StagedSave>(&store, std::move(req), cs, self.exchange_last_staged(nullptr));
  self.exchange_last_staged(staged->handle());
  return std::make_shared<PySaveHandle>(staged->handle(), std::move(keepalive), staged);
}

py::dict TensorInfoDict(const TensorInfo& t) {
  py::dict d;
  d["name"] = t.name;
  d["dtype"] = DTypeName(t.dtype);
  d["shape"] = t.shape;
  d["nbytes"] = t.nbytes;
  return d;
}

py::dict Restore(PyStore& self, const py::list& targets, std::optional<int64_t> step, bool strict, bool fallback) {
  std::vector<RestoreTarget> ts;
  ts.reserve(targets.size());
  for (const auto& h : targets) {
    Entry e = ParseEntry(h, "restore");
    RestoreTarget t;
    t.name = std::move(e.name);
    t.dtype = e.dtype;
    t.shape = std::move(e.shape);
    t.data = reinterpret_cast<void*>(e.address);
    t.nbytes = e.nbytes;
    t.check_shape = e.dtype != DType::kBytes;
    ts.push_back(std::move(t));
  }
  RestoreOptions o;
  o.step = step;
  o.strict = strict;
  o.fallback = fallback;
  o.allocate_untargeted = true;
  RestoreResult r;
  Store& store = self.get();
  Status s;
  {
    py::gil_scoped_release nogil;
    s = store.restore(ts, o, &r);
  }
  RaiseIfError(s);
  py::dict d;
  d["step"] = r.step;
  d["path"] = r.path;
  d["metadata"] = r.metadata;
  py::list tensors;
  for (const auto& t : r.tensors) tensors.append(TensorInfoDict(t));
  d["tensors"] = tensors;
  py::dict owned;
  for (auto& [name, buf] : r.owned) owned[py::str(name)] = std::make_shared<PyBuffer>(std::move(buf));
  d["owned"] = owned;
  d["missing"] = r.missing;
  d["rejected"] = r.rejected;
  d["read_s"] = r.read_s;
  d["bytes"] = r.bytes;
  d["in_place_bytes"] = r.in_place_bytes;
  d["backend"] = r.backend;
  return d;
}

py::list List(PyStore& self) {
  std::vector<CheckpointInfo> infos;
  Store& store = self.get();
  Status s;
  {
    py::gil_scoped_release nogil;
    s = store.list(&infos);
  }
  RaiseIfError(s);
  py::list out;
  for (const auto& i : infos) {
    py::dict d;
    d["step"] = i.step;
    d["path"] = i.path;
    d["world_size"] = i.world_size;
    d["bytes"] = i.bytes;
    d["valid"] = i.valid;
    d["problem"] = i.problem;
    out.append(d);
  }
  return out;
}

}  // namespace

void BindStore(py::module_& m) {
  py::class_<PyBuffer, std::shared_ptr<PyBuffer>>(m, "Buffer", py::buffer_protocol(),
                                                  "4 KiB-aligned host memory (buffer protocol, writable).")
      .def(py::init(&NewBuffer), py::arg("nbytes"), py::arg("prefault") = true)
      .def_property_readonly("nbytes", &PyBuffer::nbytes)
      .def_property_readonly("address", &PyBuffer::address)
      .def("__len__", &PyBuffer::nbytes)
      .def_buffer(&PyBuffer::info);

  py::class_<PySaveHandle, std::shared_ptr<PySaveHandle>>(m, "SaveHandle", "One asynchronous save of a Store.")
      .def_property_readonly("step", &PySaveHandle::step)
      .def("done", &PySaveHandle::done)
      .def("staged", &PySaveHandle::staged)
      .def("wait_staged", &PySaveHandle::wait_staged, py::arg("timeout_s") = py::none())
      .def("wait", &PySaveHandle::wait, py::arg("timeout_s") = py::none())
      .def("check", &PySaveHandle::check)
      .def("error", &PySaveHandle::error)
      .def("cancel", [](PySaveHandle& h) { h.h_->cancel(); })
      .def_property_readonly("bytes_total", [](PySaveHandle& h) { return h.h_->bytes_total(); })
      .def_property_readonly("bytes_written", [](PySaveHandle& h) { return h.h_->bytes_written(); })
      .def_property_readonly("path", [](PySaveHandle& h) { return h.h_->path(); })
      .def("stats", &PySaveHandle::stats);

  py::class_<PyStore>(m, "Store", "Crash-consistent checkpoints of named byte buffers (see preempt/store.h).")
      .def(py::init(&MakeStore), py::arg("root"), py::arg("rank") = 0, py::arg("world_size") = 1,
           py::arg("keep_last") = 3, py::arg("chunk_bytes") = size_t{4} << 20, py::arg("queue_depth") = 8,
           py::arg("io_backend") = "auto", py::arg("direct_io") = "auto", py::arg("commit_timeout_s") = 600.0,
           py::arg("dedup") = true, py::arg("write_from_items") = true, py::arg("read_into_targets") = true,
           py::arg("read_queue_depth") = 32)
      .def("save_async", &SaveAsync, py::arg("step"), py::arg("items"), py::arg("metadata"),
           py::arg("keepalive") = py::none())
      .def("save_staged", &SaveStaged, py::arg("step"), py::arg("copies"), py::arg("items"), py::arg("metadata"),
           py::arg("keepalive") = py::none())
      .def("restore", &Restore, py::arg("targets"), py::arg("step") = py::none(), py::arg("strict") = true,
           py::arg("fallback") = true)
      .def("list", &List)
      .def("valid_steps", [](PyStore& self) {
        std::vector<int64_t> steps;
        Store& store = self.get();
        Status s;
        {
          py::gil_scoped_release nogil;
          s = store.valid_steps(&steps);
        }
        if (s.code() == StatusCode::kNotFound) steps.clear();
        else RaiseIfError(s);
        return steps;
      })
      .def("close", &PyStore::close)
      .def_static("verify", [](const std::string& dir) {
        VerifyResult v;
        Status s;
        {
          py::gil_scoped_release nogil;
          s = Store::Verify(dir, &v);
        }
        RaiseIfError(s);
        py::dict d;
        d["ok"] = v.ok;
        d["problems"] = v.problems;
        d["bytes_checked"] = v.bytes_checked;
        return d;
      }, py::arg("dir"));

  m.def("step_dir_name", &StepDirName, py::arg("step"));
  m.def("is_store_root_entry", &IsStoreRootEntry, py::arg("name"));
  m.def("is_valid_entry_name", &IsValidEntryName, py::arg("name"));
}

}  // namespace preempt::python
