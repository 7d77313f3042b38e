// preempt/signal.h — notices the scheduler's "please stop" and "please checkpoint" signals.
//
// One process-wide set of handlers (signal dispositions are process-wide). The handler does only
// async-signal-safe work: relaxed/seq-cst lock-free atomics, clock_gettime, write() to an eventfd,
// and, when the previous disposition was a user handler, a call to that handler (chaining).
//
// Stop signals (default SIGTERM; add SIGUSR1 for SLURM's `--signal=USR1@N`):
//   the first one sets the stop flag, records its receipt time on CLOCK_MONOTONIC and
//   CLOCK_REALTIME and the sender pid, and makes the eventfd readable. The stop deadline is
//       receipt + grace − reserve
//   A second (third, ...) stop signal only increments stop_signal_count(): the deadline stays
//   anchored at the FIRST receipt, because the scheduler's SIGKILL timer started then. With
//   SignalOptions::exit_after_signals = N > 0, the N-th stop signal ends the process at once with
//   _exit(128 + signo) (an operator's "I really mean it"); the default 0 never does that.
// Checkpoint signals (default SIGUSR2): each one increments checkpoint_request_count() and makes
//   the eventfd readable; nothing stops. The runtime saves asynchronously at the next step.
//
// Previous handlers: a previous *user* handler (sa_handler/sa_sigaction that is not SIG_DFL or
// SIG_IGN) is called after preempt records the signal, so e.g. a Python or launcher handler keeps
// working. SIG_DFL is not chained (that would terminate the process, defeating the point).
// UninstallSignalHandlers() restores exactly the previous dispositions.
//
// Grace period (seconds between the stop signal and SIGKILL) — first match wins:
//   SignalOptions::grace_s >= 0, else env PREEMPT_GRACE_S, else 30 (the Kubernetes default).
//   * Kubernetes: the kubelet sends SIGTERM, waits the pod's `terminationGracePeriodSeconds`
//     (default 30; preStop hook time counts against it), then SIGKILL. The value is not visible
//     inside the container, so set it in the pod spec next to it:
//         terminationGracePeriodSeconds: 120
//         env: [{name: PREEMPT_GRACE_S, value: "120"}]
//   * SLURM: `sbatch --signal=USR1@90` sends SIGUSR1 90 s before the time limit; use
//     PREEMPT_STOP_SIGNALS=TERM,USR1 and PREEMPT_GRACE_S=90 (`--signal=B:USR1@90` when the
//     trainer runs in the batch shell). On preemption SLURM signals the tasks of the job's steps
//     when the partition's GraceTime starts and kills the job when it ends; a trainer in the batch
//     step gets its signal at the start only with SlurmctldParameters=preempt_send_user_signal and
//     `--signal=B:...`, else SIGTERM at the end and KillWait (docs/slurm.md). Set PREEMPT_GRACE_S
//     to the grace the job gets.
// Reserve (kept back for exit and slack): SignalOptions::reserve_s >= 0, else env
// PREEMPT_GRACE_RESERVE_S, else max(1 s, 10 % of grace), capped at half the grace.
//
// Signals outside a Runtime's life. A stop signal before the handlers exist kills the process
// (SIG_DFL), and in a data-parallel job its peers then wait out the rendezvous timeout. Install
// the handlers first thing in `main`, before the process group and the Runtime:
//     int main() {
//       preempt::Status s = preempt::InstallSignalHandlers();   // a SIGTERM from here on is recorded
//       ... rendezvous, model ...
//       int code;
//       { preempt::Runtime rt(opts); ...; code = rt.exit_code(); }   // rt adopts the handlers
//       return code;        // a SIGTERM after rt is gone is still only recorded: the finished
//     }                     // job exits with its own code instead of being killed
// A Runtime adopts handlers that are already installed: it keeps the stop already recorded (the
// first step_end stops, with the deadline anchored at that receipt) and leaves them installed when
// it is destroyed. Handlers a Runtime installed itself are removed by its destructor.
//
// Thread-safety: every accessor may be called from any thread at any time; Install/Uninstall must
// not race with each other (call them from the main thread).
#pragma once

#include <csignal>
#include <cstdint>
#include <string>
#include <vector>

#include "preempt/deadline.h"
#include "preempt/status.h"

namespace preempt {

struct SignalOptions {
  // Signals meaning "stop now, checkpoint, exit". Empty: from env PREEMPT_STOP_SIGNALS
  // ("TERM,USR1" or numbers), else {SIGTERM}.
  std::vector<int> stop_signals;
  // Signals meaning "checkpoint at the next step, keep training". Empty: env
  // PREEMPT_CHECKPOINT_SIGNALS, else {SIGUSR2}. Use {0} ("none") to install none.
  std::vector<int> checkpoint_signals;
  double grace_s = -1;      // < 0: env PREEMPT_GRACE_S, else 30
  double reserve_s = -1;    // < 0: env PREEMPT_GRACE_RESERVE_S, else max(1, 0.1*grace) capped at grace/2
  bool chain = true;        // call a previous user handler after recording
  int exit_after_signals = 0;  // > 0: the N-th stop signal _exit(128+signo)s immediately
};

// Grace and reserve after applying options and environment (what Install will use).
struct GraceConfig {
  double grace_s = 30;
  double reserve_s = 3;
  std::string grace_source;  // "options", "env PREEMPT_GRACE_S", "default"
};
GraceConfig ResolveGrace(const SignalOptions& opts);

// Parses "TERM,USR1,12" / "SIGTERM" into signal numbers; kInvalidArgument on unknown names.
Status ParseSignalList(const std::string& text, std::vector<int>* out);

// Installs the handlers (process-wide). kInvalidArgument when already installed or a signal
// cannot be caught (SIGKILL, SIGSTOP) or appears in both lists. Clears previous stop state.
Status InstallSignalHandlers(const SignalOptions& opts = {});
// Restores the previous dispositions. Recorded state stays readable. No-op when not installed.
void UninstallSignalHandlers();
bool SignalHandlersInstalled();

// --- state recorded by the handler (lock-free; cheap enough for every training step) -----------
bool StopRequested();              // one relaxed load
int StopSignal();                  // signo of the first stop signal (0: none; -1: RequestStop())
int StopSignalCount();             // stop signals received since install / ClearSignalState
int StopSenderPid();               // si_pid of the first stop signal (0 when unknown)
uint64_t CheckpointRequestCount(); // monotonically increasing; compare with the last value seen
// Receipt time of the first stop signal in ns: CLOCK_MONOTONIC (same clock as Deadline's
// steady_clock on Linux) and CLOCK_REALTIME (for logs and hints). 0 when no stop yet.
int64_t StopReceiptMonotonicNs();
int64_t StopReceiptRealtimeNs();
// receipt + grace − reserve; Deadline::Never() before any stop.
Deadline StopDeadline();
// Grace and reserve in effect (defaults resolved at install; ResolveGrace({}) before).
double GraceSeconds();
double ReserveSeconds();

// An eventfd (EFD_NONBLOCK|EFD_CLOEXEC) that becomes readable on every stop or checkpoint signal;
// for poll/epoll loops. Valid from the first install until process exit (-1 before). Reading it
// resets it; the flags above are unaffected.
int SignalEventFd();

// The same effect as a stop signal, from normal code (e.g. a peer rank told us to stop, or a
// test). Not async-signal-safe-only; `reason` is stored as signo -1.
void RequestStop();
// Forgets stop state and counters (tests; a runtime that handled a stop and keeps running).
void ClearSignalState();

// "SIGTERM", "SIGUSR1", ... (never allocates; "signal" for unknown numbers).
const char* SignalName(int signo);

}  // namespace preempt
