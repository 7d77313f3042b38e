// preempt._C signal functions — the C++ stop/checkpoint signal handler (preempt/signal.h).
//
// The handler is installed in C, so a SIGTERM is recorded even while the main thread is inside a
// long native call; Python only reads the flag. A Python handler installed with `signal.signal`
// BEFORE install_signal_handlers() is chained (it still runs); one installed after replaces ours.
#include <pybind11/stl.h>

#include <chrono>
#include <limits>

#include "bindings.h"
#include "preempt/signal.h"

namespace preempt::python {
namespace {

std::vector<int> SignalList(const py::object& o, const char* what) {
  std::vector<int> out;
  if (o.is_none()) return out;
  if (py::isinstance<py::str>(o)) {
    Status s = ParseSignalList(o.cast<std::string>(), &out);
    if (!s.ok()) RaiseStatus(s.with_context(what));
    return out;
  }
  for (const auto& h : o) out.push_back(h.cast<int>());  // ints and signal.Signals
  return out;
}

void Install(const py::object& stop_signals, const py::object& checkpoint_signals, double grace_s, double reserve_s,
             bool chain, int exit_after_signals) {
  SignalOptions o;
  o.stop_signals = SignalList(stop_signals, "stop_signals");
  o.checkpoint_signals = SignalList(checkpoint_signals, "checkpoint_signals");
  o.grace_s = grace_s;
  o.reserve_s = reserve_s;
  o.chain = chain;
  if (exit_after_signals < 0) RaiseInvalid("exit_after_signals must be >= 0");
  o.exit_after_signals = exit_after_signals;
  RaiseIfError(InstallSignalHandlers(o));
}

// Seconds left until receipt + grace − reserve; +inf before any stop.
double StopRemainingSeconds() {
  if (!StopRequested()) return std::numeric_limits<double>::infinity();
  Deadline d = StopDeadline();
  return std::chrono::duration<double>(d.time() - Deadline::Clock::now()).count();
}

}  // namespace

void BindSignal(py::module_& m) {
  m.def("install_signal_handlers", &Install, py::arg("stop_signals") = py::none(),
        py::arg("checkpoint_signals") = py::none(), py::arg("grace_s") = -1.0, py::arg("reserve_s") = -1.0,
        py::arg("chain") = true, py::arg("exit_after_signals") = 0);
  m.def("uninstall_signal_handlers", &UninstallSignalHandlers);
  m.def("signal_handlers_installed", &SignalHandlersInstalled);
  m.def("stop_requested", &StopRequested);
  m.def("stop_signal", &StopSignal);
  m.def("stop_signal_count", &StopSignalCount);
  m.def("stop_sender_pid", &StopSenderPid);
  m.def("checkpoint_request_count", &CheckpointRequestCount);
  m.def("stop_receipt_realtime_ns", &StopReceiptRealtimeNs);
  m.def("stop_remaining_s", &StopRemainingSeconds);
  m.def("grace_s", &GraceSeconds);
  m.def("reserve_s", &ReserveSeconds);
  m.def("signal_event_fd", &SignalEventFd);
  m.def("request_stop", &RequestStop);
  m.def("clear_signal_state", &ClearSignalState);
  m.def("signal_name", [](int signo) { return std::string(SignalName(signo)); }, py::arg("signo"));
  m.def("parse_signal_list", [](const std::string& text) {
    std::vector<int> out;
    RaiseIfError(ParseSignalList(text, &out));
    return out;
  }, py::arg("text"));
}

}  // namespace preempt::python
