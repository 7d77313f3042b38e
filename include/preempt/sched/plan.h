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
//    class from spec.priority (>= 1000000 high, >= 100 medium, else low; the values of
//    examples/k8s/priorityclasses.yaml), or, without it, from a PriorityClass named exactly
//    preempt-high|medium|low (or high|medium|low), else low (noted); queue from the namespace, hints
//    from the annotation "preempt.dev/hints" (the JSON itself) or "preempt.dev/hints-file" (a path
//    readable here). Nodes come from a node list (`kubectl get nodes -o json`: GPUs from
//    status.allocatable, else status.capacity, nvidia.com/gpu; nodes without GPUs left out), so idle
//    nodes are seen; without one, they are the running pods' spec.nodeName, each with
//    `gpus_per_node` GPUs.
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
// A GPU limit that is not a whole number ("abc") is an error naming the pod and the field. With a
// node list, a running pod on a node that is not in it is an error.
Status LoadK8sPodList(const std::string& path, int gpus_per_node, double now_unix, ClusterState* out,
                      std::vector<std::string>* notes);
// `nodes_path` empty: no node list.
Status LoadK8sPodList(const std::string& path, const std::string& nodes_path, int gpus_per_node, double now_unix,
                      ClusterState* out, std::vector<std::string>* notes);
Status ParseK8sNodeList(const std::string& text, const std::string& origin, std::vector<Node>* out);
// The same from text; `origin` names the input in errors. hints_file paths are relative to
// `base_dir`; with base_dir empty (or read_hints_files false) no hints file is read and the job's
// hints stay unknown (noted).
Status ParseSnapshot(const std::string& text, const std::string& origin, const std::string& base_dir,
                     ClusterState* out, std::vector<std::string>* notes);
Status ParseK8sPodList(const std::string& text, const std::string& origin, int gpus_per_node, double now_unix,
                       bool read_hints_files, ClusterState* out, std::vector<std::string>* notes);
// `nodes` (ParseK8sNodeList) empty: no node list.
Status ParseK8sPodList(const std::string& text, const std::string& origin, int gpus_per_node, double now_unix,
                       bool read_hints_files, const std::vector<Node>& nodes, ClusterState* out,
                       std::vector<std::string>* notes);

// Human-readable ranked decisions: one line per action and per blocked high-priority job.
std::string FormatDecisions(const ClusterState& state, const Decisions& d);
// The same as a JSON object {"actions":[...],"waits":[...]}.
std::string DecisionsToJson(const ClusterState& state, const Decisions& d);

// Parses RFC 3339 UTC times as Kubernetes writes them ("2026-12-02T13:40:00Z"); false if not.
bool ParseRfc3339(const std::string& s, double* unix_out);

}  // namespace preempt::sched
