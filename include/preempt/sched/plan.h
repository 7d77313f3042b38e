// preempt/sched/plan.h — build a ClusterState from a snapshot of a real cluster, for `plan`.
//
// Two inputs are understood:
//  * a snapshot file, schema "preempt.snapshot/1" (docs/sched.md):
//      {"schema":"preempt.snapshot/1", "now_unix": 1764680000,            (optional; default: now)
//       "nodes": [{"name":"n0","gpus":8}],
//       "jobs":  [{"id":"a","class":"low","queue":"research","gpus":2,"state":"running",
//                  "node":"n0","submit_unix":..,"start_unix":..,
//                  "hints_file":"a.hints.json"   (relative to the snapshot's directory) }]}
//  * a Kubernetes pod list (`kubectl get pods -A -o json`): GPUs from the nvidia.com/gpu limits,
//    class from spec.priorityClassName (containing high/medium/low) or spec.priority, queue from
//    the namespace, hints from the annotation "preempt.dev/hints" (the JSON itself) or
//    "preempt.dev/hints-file" (a path readable here). Nodes are the pods' spec.nodeName, each
//    with `gpus_per_node` GPUs.
// Missing or unreadable hints are noted and leave the job's hints empty ("unknown cost").
//
// Thread-safety: reentrant.
#pragma once

#include <string>
#include <vector>

#include "preempt/sched/policy.h"
#include "preempt/status.h"

namespace preempt::sched {

// Both reject, naming the file and the field: numbers that are not finite, GPU counts that are not
// whole numbers in range, a node or job (pod) listed twice, and running jobs that would hold more
// GPUs than their node has.
Status LoadSnapshot(const std::string& path, ClusterState* out, std::vector<std::string>* notes);
Status LoadK8sPodList(const std::string& path, int gpus_per_node, double now_unix, ClusterState* out,
                      std::vector<std::string>* notes);
// The same from text; `origin` names the input in errors. hints_file paths are relative to
// `base_dir`; with base_dir empty (or read_hints_files false) no hints file is read and the job's
// hints stay unknown (noted).
Status ParseSnapshot(const std::string& text, const std::string& origin, const std::string& base_dir,
                     ClusterState* out, std::vector<std::string>* notes);
Status ParseK8sPodList(const std::string& text, const std::string& origin, int gpus_per_node, double now_unix,
                       bool read_hints_files, ClusterState* out, std::vector<std::string>* notes);

// Human-readable ranked decisions: one line per action and per blocked high-priority job.
std::string FormatDecisions(const ClusterState& state, const Decisions& d);
// The same as a JSON object {"actions":[...],"waits":[...]}.
std::string DecisionsToJson(const ClusterState& state, const Decisions& d);

// Parses RFC 3339 UTC times as Kubernetes writes them ("2026-12-02T13:40:00Z"); false if not.
bool ParseRfc3339(const std::string& s, double* unix_out);

}  // namespace preempt::sched
