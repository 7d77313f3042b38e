// PolicyOptions: the field table (JSON, --help, docs) and the presets (policy_options.h).
#include "preempt/sched/policy_options.h"

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <sstream>

namespace preempt::sched {
namespace {

constexpr double kMaxSeconds = 1e9;
constexpr int kMaxCount = 1000000;
constexpr double kInfinity = std::numeric_limits<double>::infinity();

// A field: its description, how JSON sets it (false: the value is out of its range), and its
// value as JSON text.
struct Field {
  PolicyField doc;
  std::function<bool(const rapidjson::Value&, PolicyOptions*)> set;
  std::function<std::string(const PolicyOptions&)> get;
};

std::string NumText(double v) {
  char buf[64];
  snprintf(buf, sizeof buf, "%.15g", v);
  return buf;
}

Field Seconds(const char* name, const char* group, double PolicyOptions::*m, const char* help) {
  return {{name, group, "seconds", "[0, 1e9]", help},
          [m](const rapidjson::Value& v, PolicyOptions* o) {
            if (!v.IsNumber() || !(v.GetDouble() >= 0 && v.GetDouble() <= kMaxSeconds)) return false;
            o->*m = v.GetDouble();
            return true;
          },
          [m](const PolicyOptions& o) { return NumText(o.*m); }};
}

Field Number(const char* name, const char* group, const char* type, double lo, double hi, const char* range,
             double PolicyOptions::*m, const char* help) {
  return {{name, group, type, range, help},
          [m, lo, hi](const rapidjson::Value& v, PolicyOptions* o) {
            if (!v.IsNumber() || !(v.GetDouble() >= lo && v.GetDouble() <= hi)) return false;
            o->*m = v.GetDouble();
            return true;
          },
          [m](const PolicyOptions& o) { return NumText(o.*m); }};
}

Field Count(const char* name, const char* group, int PolicyOptions::*m, const char* help) {
  return {{name, group, "integer", "[0, 1000000]", help},
          [m](const rapidjson::Value& v, PolicyOptions* o) {
            if (!v.IsInt() || v.GetInt() < 0 || v.GetInt() > kMaxCount) return false;
            o->*m = v.GetInt();
            return true;
          },
          [m](const PolicyOptions& o) { return std::to_string(o.*m); }};
}

Field Flag(const char* name, const char* group, bool PolicyOptions::*m, const char* help) {
  return {{name, group, "boolean", "true | false", help},
          [m](const rapidjson::Value& v, PolicyOptions* o) {
            if (!v.IsBool()) return false;
            o->*m = v.GetBool();
            return true;
          },
          [m](const PolicyOptions& o) { return std::string(o.*m ? "true" : "false"); }};
}

// A string field naming one of two values of an enum member; `range` lists the two names as
// the docs and errors show them.
template <class E>
Field TwoNameField(const char* name, const char* group, const char* range, E PolicyOptions::*m, const char* a_name,
                   E a, const char* b_name, E b, const char* help) {
  return {{name, group, "string", range, help},
          [=](const rapidjson::Value& v, PolicyOptions* o) {
            const std::string s = v.IsString() ? v.GetString() : "";
            if (s == a_name)
              o->*m = a;
            else if (s == b_name)
              o->*m = b;
            else
              return false;
            return true;
          },
          [=](const PolicyOptions& o) { return "\"" + std::string(o.*m == a ? a_name : b_name) + "\""; }};
}

Field KindField() {
  using O = PolicyOptions;
  return {{"kind", "policy", "string", "\"fcfs\" | \"k8s\" | \"hint\"",
           "fcfs: no preemption; k8s: kube-scheduler victim order, evict now; hint: hint-aware"},
          [](const rapidjson::Value& v, O* o) {
            std::string s = v.IsString() ? v.GetString() : "";
            if (s == "fcfs")
              o->kind = PolicyKind::kFcfs;
            else if (s == "k8s")
              o->kind = PolicyKind::kKubernetes;
            else if (s == "hint")
              o->kind = PolicyKind::kHintAware;
            else
              return false;
            return true;
          },
          [](const O& o) { return "\"" + std::string(PolicyKindName(o.kind)) + "\""; }};
}

Field PriorityValueField() {
  using O = PolicyOptions;
  return {{"priority_value", "classes", "[low, medium, high]", "integers",
           "cluster priority of each class (plan --k8s maps spec.priority with these)"},
          [](const rapidjson::Value& v, O* o) {
            if (!v.IsArray() || v.Size() != kNumClasses) return false;
            for (int i = 0; i < kNumClasses; ++i)
              if (!v[i].IsInt64()) return false;
            for (int i = 0; i < kNumClasses; ++i) o->priority_value[i] = v[i].GetInt64();
            return true;
          },
          [](const O& o) {
            return "[" + std::to_string(o.priority_value[0]) + "," + std::to_string(o.priority_value[1]) + "," +
                   std::to_string(o.priority_value[2]) + "]";
          }};
}

Field PreemptsLowerField() {
  using O = PolicyOptions;
  return {{"preempts_lower", "classes", "[low, medium, high]", "booleans",
           "whether each class may preempt lower classes (false: the \"Never\" preemption policy)"},
          [](const rapidjson::Value& v, O* o) {
            if (!v.IsArray() || v.Size() != kNumClasses) return false;
            for (int i = 0; i < kNumClasses; ++i)
              if (!v[i].IsBool()) return false;
            for (int i = 0; i < kNumClasses; ++i) o->preempts_lower[i] = v[i].GetBool();
            return true;
          },
          [](const O& o) {
            std::string s = "[";
            for (int i = 0; i < kNumClasses; ++i)
              s += std::string(i ? "," : "") + (o.preempts_lower[i] ? "true" : "false");
            return s + "]";
          }};
}

Field VictimGraceField() {
  return TwoNameField("victim_grace", "eviction", "\"own\" | \"hint-sized\"", &PolicyOptions::victim_grace, "own",
                      VictimGrace::kOwn, "hint-sized", VictimGrace::kHintSized,
                      "grace period of a SIGTERM eviction: the victim's own, or 1.5 x its hints' grace needed + 10 s "
                      "(own when its cost is not measured)");
}

Field HighTolerableWaitField() {
  using O = PolicyOptions;
  return {{"high_tolerable_wait", "tolerable wait", "string or seconds", "\"victim-grace\" | \"off\" | (0, 1e9]",
           "longest a high preemptor waits for one victim's save (slower savers are killed): the victim's "
           "grace period, no limit, or fixed seconds"},
          [](const rapidjson::Value& v, O* o) {
            if (v.IsString() && std::string(v.GetString()) == "victim-grace") {
              o->high_tolerable_wait = TolerableWait::kVictimGrace;
            } else if (v.IsString() && std::string(v.GetString()) == "off") {
              o->high_tolerable_wait = TolerableWait::kOff;
            } else if (v.IsNumber() && v.GetDouble() > 0 && v.GetDouble() <= kMaxSeconds) {
              o->high_tolerable_wait = TolerableWait::kFixed;
              o->high_tolerable_wait_s = v.GetDouble();
            } else {
              return false;
            }
            return true;
          },
          [](const O& o) {
            switch (o.high_tolerable_wait) {
              case TolerableWait::kVictimGrace: return std::string("\"victim-grace\"");
              case TolerableWait::kOff: return std::string("\"off\"");
              case TolerableWait::kFixed: break;
            }
            return NumText(o.high_tolerable_wait_s);
          }};
}

Field AheadWhenField() {
  return TwoNameField("ahead_when", "ahead checkpoints", "\"high-pending\" | \"headroom-short\"",
                      &PolicyOptions::ahead_when, "high-pending", AheadTrigger::kHighPending, "headroom-short",
                      AheadTrigger::kHeadroomShort,
                      "when checkpoints are asked for ahead of need: a high job still pending after the pass, or "
                      "that or fewer free GPUs than the reserved headroom");
}

Field SuspendField() {
  using O = PolicyOptions;
  return {{"suspend", "schedule", "object or \"off\"",
           "{\"class\": low|medium|high, \"from_s\", \"to_s\" in [0, period_s], \"period_s\" in [1, 1e9]} | \"off\"",
           "suspend a class during [from_s, to_s) of every period of the clock: its running jobs are "
           "checkpointed and preempted, its pending jobs wait; they resume when the window closes"},
          [](const rapidjson::Value& v, O* o) {
            if (v.IsString() && std::string(v.GetString()) == "off") {
              o->suspend.on = false;
              return true;
            }
            if (!v.IsObject() || v.MemberCount() != 4) return false;
            SuspendWindow w;
            w.on = true;
            auto num = [&](const char* k, double lo, double hi, double* out) {
              if (!v.HasMember(k) || !v[k].IsNumber() || !(v[k].GetDouble() >= lo && v[k].GetDouble() <= hi))
                return false;
              *out = v[k].GetDouble();
              return true;
            };
            if (!v.HasMember("class") || !v["class"].IsString() || !ParsePriorityClass(v["class"].GetString(), &w.cls))
              return false;
            if (!num("period_s", 1, kMaxSeconds, &w.period_s) || !num("from_s", 0, w.period_s, &w.from_s) ||
                !num("to_s", 0, w.period_s, &w.to_s) || w.from_s == w.to_s)
              return false;
            o->suspend = w;
            return true;
          },
          [](const O& o) {
            if (!o.suspend.on) return std::string("\"off\"");
            return "{\"class\":\"" + std::string(PriorityClassName(o.suspend.cls)) +
                   "\",\"from_s\":" + NumText(o.suspend.from_s) + ",\"to_s\":" + NumText(o.suspend.to_s) +
                   ",\"period_s\":" + NumText(o.suspend.period_s) + "}";
          }};
}

Field GpuHourPriceField() {
  using O = PolicyOptions;
  return {{"gpu_hour_price", "accounting", "[low, medium, high]", "numbers in [0, 1e9]",
           "price of one GPU-hour held by each class, for the simulator's bill per queue"},
          [](const rapidjson::Value& v, O* o) {
            if (!v.IsArray() || v.Size() != kNumClasses) return false;
            for (int i = 0; i < kNumClasses; ++i)
              if (!v[i].IsNumber() || !(v[i].GetDouble() >= 0 && v[i].GetDouble() <= kMaxSeconds)) return false;
            for (int i = 0; i < kNumClasses; ++i) o->gpu_hour_price[i] = v[i].GetDouble();
            return true;
          },
          [](const O& o) {
            return "[" + NumText(o.gpu_hour_price[0]) + "," + NumText(o.gpu_hour_price[1]) + "," +
                   NumText(o.gpu_hour_price[2]) + "]";
          }};
}

std::vector<Field> MakeFields() {
  using O = PolicyOptions;
  std::vector<Field> f;
  f.push_back(KindField());
  f.push_back(PriorityValueField());
  f.push_back(PreemptsLowerField());
  f.push_back(Flag("checkpoint_then_evict", "eviction", &O::checkpoint_then_evict,
                   "ask a victim to checkpoint, evict it after the commit"));
  f.push_back(Flag("sigterm_save", "eviction", &O::sigterm_save,
                   "SIGTERM a victim whose save fits the grace it is granted (it saves inside it)"));
  f.push_back(Seconds("kill_now_max_lost_s", "eviction", &O::kill_now_max_lost_s,
                      "for a high preemptor, kill at once a victim with at most this much uncommitted work (0 = off)"));
  f.push_back(Flag("kill_when_cheaper", "eviction", &O::kill_when_cheaper,
                   "kill at once a victim with less uncommitted work than its save would lose"));
  f.push_back(Seconds("checkpoint_deadline_s", "eviction", &O::checkpoint_deadline_s,
                      "evict anyway when a requested commit has not shown up by then"));
  f.push_back(Flag("kill_after_commit", "eviction", &O::kill_after_commit,
                   "once a requested commit is durable, kill at once (no second save on SIGTERM)"));
  f.push_back(VictimGraceField());
  f.push_back(Number("repeat_victim_weight", "victim cost", "number", 0, 1e6, "[0, 1e6]", &O::repeat_victim_weight,
                     "each earlier preemption or move of a victim multiplies its cost in the victim search by 1 + "
                     "this (0 = off)"));
  f.push_back(Count("few_victims_first", "victim cost", &O::few_victims_first,
                    "a preemptor's victim search ranks nodes needing at most this many victims before nodes "
                    "needing more (after protected GPUs and in time, before lost work; 0 = off)"));
  f.push_back(Flag("fewest_victims_without_medium", "victim cost", &O::fewest_victims_without_medium,
                   "while no medium job holds or waits for GPUs, the victim search ranks nodes by number of "
                   "victims, then GPUs freed beyond need (in place of few_victims_first; before lost work)"));
  f.push_back(Flag("pack_high_jobs", "victim cost", &O::pack_high_jobs,
                   "while a medium job holds or waits for GPUs, a high preemptor smaller than a node ranks nodes "
                   "running a high job first (after the number of victims, before lost work)"));
  f.push_back(HighTolerableWaitField());
  f.push_back(Seconds("tolerable_kill_max_lost_s", "tolerable wait", &O::tolerable_kill_max_lost_s,
                      "a too-slow saver with more uncommitted work than this saves anyway (0 = no limit)"));
  f.push_back(Flag("high_in_time_first", "tolerable wait", &O::high_in_time_first,
                   "a high job's victim search ranks nodes whose victims leave within high_wait_guard_s first "
                   "(after protected GPUs, before lost work)"));
  f.push_back(Count("tolerable_wait_min_gpus", "tolerable wait", &O::tolerable_wait_min_gpus,
                    "the tolerable wait applies to high preemptors of at least this many GPUs"));
  f.push_back(Seconds("high_wait_guard_s", "high-wait guard", &O::high_wait_guard_s,
                      "the high-priority first-start wait the guard defends (0 = off)"));
  f.push_back(Seconds("high_wait_guard_kill_max_lost_s", "high-wait guard", &O::high_wait_guard_kill_max_lost_s,
                      "while at risk, a too-slow saver with up to this much uncommitted work is killed for a high "
                      "preemptor (when above tolerable_kill_max_lost_s; 0 = no limit)"));
  f.push_back(Number("high_wait_guard_fraction", "high-wait guard", "fraction", 0, 1, "[0, 1]",
                     &O::high_wait_guard_fraction,
                     "at risk when one more late start would put more than this fraction of recent first starts late"));
  f.push_back(Number("high_wait_guard_hopeless_fraction", "high-wait guard", "fraction", 0, 1, "[0, 1]",
                     &O::high_wait_guard_hopeless_fraction,
                     "not at risk when more than this fraction are late already (the target is lost)"));
  f.push_back(Number("high_wait_guard_window_s", "high-wait guard", "seconds", 1, 7 * 86400.0, "[1, 604800]",
                     &O::high_wait_guard_window_s, "first starts this recent count"));
  f.push_back(Count("high_wait_guard_min_jobs", "high-wait guard", &O::high_wait_guard_min_jobs,
                    "the guard acts only once this many first starts and pending high jobs are counted"));
  f.push_back(Seconds("min_runtime_s", "anti-thrashing", &O::min_runtime_s,
                      "not a victim before running this long since it (re)started"));
  f.push_back(Seconds("min_runtime_per_preemption_s", "anti-thrashing", &O::min_runtime_per_preemption_s,
                      "the minimum run time grows by this for each earlier preemption or move of the job"));
  f.push_back(Seconds("cooldown_s", "anti-thrashing", &O::cooldown_s, "a preempted job is not restarted before this"));
  f.push_back(Seconds("high_min_runtime_override_s", "anti-thrashing", &O::high_min_runtime_override_s,
                      "a high job waiting this long may take victims inside their minimum run time, those last (0 = off)"));
  f.push_back(Count("protect_after_preemptions", "anti-thrashing", &O::protect_after_preemptions,
                    "a job preempted or moved this many times is protected like one inside its minimum run time, "
                    "for good (0 = off)"));
  f.push_back(Seconds("nonhigh_preempt_delay_s", "anti-thrashing", &O::nonhigh_preempt_delay_s,
                      "a job below high priority preempts only after waiting this long (0 = off)"));
  f.push_back(Seconds("budget_window_s", "budget", &O::budget_window_s, "per-queue preemption budget window"));
  f.push_back(Count("budget_max_preemptions", "budget", &O::budget_max_preemptions,
                    "victims per queue per window (0 = unlimited)"));
  f.push_back(Number("budget_max_lost_gpu_hours", "budget", "number", 0, kMaxSeconds, "[0, 1e9]",
                     &O::budget_max_lost_gpu_hours, "estimated lost GPU-hours per queue per window (0 = unlimited)"));
  f.push_back(Number("reserved_headroom", "capacity", "fraction", 0, 1, "[0, 1]", &O::reserved_headroom,
                     "fraction of all GPUs only high priority may take"));
  f.push_back(Number("reserved_headroom_without_medium", "capacity", "fraction", 0, 1, "[0, 1]",
                     &O::reserved_headroom_without_medium,
                     "in place of reserved_headroom while no medium job holds or waits for GPUs"));
  f.push_back(Count("reserved_headroom_min_gpus", "capacity", &O::reserved_headroom_min_gpus,
                    "with a reserve fraction > 0, the reserve is at least this many GPUs on a cluster of at least "
                    "16 GPUs"));
  f.push_back(Flag("headroom_keep_free", "capacity", &O::headroom_keep_free,
                   "non-high work does not start into the reserved headroom's last free GPUs"));
  f.push_back(Seconds("headroom_high_window_s", "capacity", &O::headroom_high_window_s,
                      "the headroom is kept free (or refilled) while a high job submitted this recently is present "
                      "(0 = always)"));
  f.push_back(Flag("headroom_low_restarts", "capacity", &O::headroom_low_restarts,
                   "a low job preempted before may restart into the kept-free headroom"));
  f.push_back(Seconds("headroom_low_wait_s", "capacity", &O::headroom_low_wait_s,
                      "a low job no larger than the headroom that has waited this long since submission may take "
                      "one GPU of it (0 = never)"));
  f.push_back(Flag("refill_headroom", "capacity", &O::refill_headroom,
                   "keep the reserved headroom free by preempting lower jobs in the background"));
  f.push_back(Number("low_guaranteed_share", "capacity", "fraction", 0, 1, "[0, 1]", &O::low_guaranteed_share,
                     "low priority may always hold this fraction; never preempted below it"));
  f.push_back(Count("reserved_nodes", "capacity", &O::reserved_nodes,
                    "whole nodes kept free for high priority against costly lower jobs (0 = off)"));
  f.push_back(Number("reserved_nodes_min_restore_gpu_s", "capacity", "GPU-seconds", 0, kMaxSeconds, "[0, 1e9]",
                     &O::reserved_nodes_min_restore_gpu_s,
                     "a lower job is kept off the reserved nodes when GPUs x restore time is at least this"));
  f.push_back(Seconds("reserved_nodes_high_window_s", "capacity", &O::reserved_nodes_high_window_s,
                      "the nodes are reserved while a high job submitted this recently is present (0 = always)"));
  f.push_back(Seconds("reserved_nodes_max_wait_s", "capacity", &O::reserved_nodes_max_wait_s,
                      "a lower job kept off the reserved nodes for this long (since submitted or requeued) no "
                      "longer is (0 = never)"));
  f.push_back(Seconds("reserved_nodes_max_first_wait_without_medium_s", "capacity",
                      &O::reserved_nodes_max_first_wait_without_medium_s,
                      "in place of reserved_nodes_max_wait_s for a job never preempted while no medium job holds or "
                      "waits for GPUs (0 = never)"));
  f.push_back(Seconds("hints_stale_s", "unknown costs", &O::hints_stale_s, "hints older than this are unknown"));
  f.push_back(Seconds("unknown_lost_work_s", "unknown costs", &O::unknown_lost_work_s,
                      "lost work assumed for a job without valid hints (never free)"));
  f.push_back(Seconds("unknown_save_s", "unknown costs", &O::unknown_save_s,
                      "save time assumed when hints carry no measured checkpoint cost"));
  f.push_back(Seconds("restore_s", "unknown costs", &O::restore_s, "restore time when a job does not know its own"));
  f.push_back(Count("defrag_max_moves", "defragmentation", &O::defrag_max_moves,
                    "smaller high jobs moved off one node for a high job (0 = off)"));
  f.push_back(Seconds("defrag_min_wait_s", "defragmentation", &O::defrag_min_wait_s,
                      "a high job waits this long before moves are tried for it"));
  f.push_back(Seconds("wait_alert_s", "limits", &O::wait_alert_s,
                      "suggest action when a high job's estimated wait passes this"));
  f.push_back(Count("ahead_checkpoints", "ahead checkpoints", &O::ahead_checkpoints,
                    "likely victims of high jobs (saves slower than their grace) asked to checkpoint ahead of need, "
                    "at most this many saves in flight (0 = off)"));
  f.push_back(AheadWhenField());
  f.push_back(Seconds("ahead_interval_s", "ahead checkpoints", &O::ahead_interval_s,
                      "a job is asked again only this long after its last checkpoint request"));
  f.push_back(SuspendField());
  f.push_back(GpuHourPriceField());
  f.push_back(Count("max_preemptors_per_pass", "limits", &O::max_preemptors_per_pass,
                    "bound on victim searches per decision pass"));
  return f;
}

const std::vector<Field>& Fields() {
  static const std::vector<Field> fields = MakeFields();
  return fields;
}

}  // namespace

const std::vector<PolicyField>& PolicyFields() {
  static const std::vector<PolicyField> docs = [] {
    std::vector<PolicyField> d;
    for (const Field& f : Fields()) d.push_back(f.doc);
    return d;
  }();
  return docs;
}

std::string PolicyFieldValue(const PolicyOptions& options, const std::string& name) {
  for (const Field& f : Fields())
    if (name == f.doc.name) return f.get(options);
  return "";
}

Status PolicyFromJson(const std::string& json, PolicyOptions* inout) {
  rapidjson::Document doc;
  doc.Parse(json.c_str(), json.size());
  if (doc.HasParseError())
    return Status(StatusCode::kCorruption,
                  std::string("policy: invalid JSON: ") + rapidjson::GetParseError_En(doc.GetParseError()));
  if (!doc.IsObject()) return Status(StatusCode::kCorruption, "policy: expected a JSON object");
  PolicyOptions out = *inout;
  for (auto it = doc.MemberBegin(); it != doc.MemberEnd(); ++it) {
    const std::string key = it->name.GetString();
    const Field* field = nullptr;
    for (const Field& f : Fields())
      if (key == f.doc.name) field = &f;
    if (!field) return Status(StatusCode::kInvalidArgument, "policy: unknown field '" + key + "'");
    if (!field->set(it->value, &out))
      return Status(StatusCode::kInvalidArgument,
                    "policy: field '" + key + "': expected " + field->doc.type + " " + field->doc.range);
  }
  *inout = out;
  return Status::OK();
}

std::string PolicyFieldsHelp() {
  const PolicyOptions defaults;
  std::ostringstream o;
  std::string group;
  for (const Field& f : Fields()) {
    if (group != f.doc.group) {
      group = f.doc.group;
      o << "  " << group << ":\n";
    }
    o << "    " << f.doc.name << " (" << f.doc.range << ", default " << f.get(defaults) << "): " << f.doc.help << "\n";
  }
  return o.str();
}

std::string PolicyFieldsMarkdown() {
  const PolicyOptions defaults;
  std::ostringstream o;
  o << "| group | field | values | default | meaning |\n|---|---|---|---|---|\n";
  for (const Field& f : Fields()) {
    std::string range = f.doc.range;
    for (size_t k = 0; (k = range.find('|', k)) != std::string::npos; k += 2) range.replace(k, 1, "\\|");
    o << "| " << f.doc.group << " | `" << f.doc.name << "` | " << range << " | `" << f.get(defaults) << "` | "
      << f.doc.help << " |\n";
  }
  return o.str();
}

bool SuspendWindow::open(double now) const {
  if (!on) return false;
  const double phase = now - std::floor(now / period_s) * period_s;
  return from_s < to_s ? phase >= from_s && phase < to_s : phase >= from_s || phase < to_s;
}

double SuspendWindow::next_change(double now) const {
  const double base = std::floor(now / period_s) * period_s;
  double next = kInfinity;
  for (double edge : {from_s, to_s})
    for (double at : {base + edge, base + period_s + edge})
      if (at > now) next = std::min(next, at);
  return next;
}

// ---- presets ------------------------------------------------------------------------------

PolicyOptions HintAwareNoRulesPolicy() {
  PolicyOptions c;
  c.kind = PolicyKind::kHintAware;
  c.min_runtime_s = 0;
  c.min_runtime_per_preemption_s = 0;
  c.protect_after_preemptions = 0;
  c.cooldown_s = 0;
  c.budget_max_preemptions = 0;
  c.budget_max_lost_gpu_hours = 0;
  c.reserved_headroom = 0;
  c.reserved_headroom_without_medium = 0;
  c.headroom_keep_free = false;
  c.refill_headroom = false;
  c.low_guaranteed_share = 0;
  c.reserved_nodes = 0;
  c.nonhigh_preempt_delay_s = 0;
  c.defrag_max_moves = 0;
  c.repeat_victim_weight = 0;
  c.ahead_checkpoints = 0;
  c.high_wait_guard_s = 0;
  c.high_in_time_first = false;
  c.few_victims_first = 0;
  c.fewest_victims_without_medium = false;
  c.pack_high_jobs = false;
  return c;
}

PolicyOptions FcfsPolicy() {
  PolicyOptions c = HintAwareNoRulesPolicy();
  c.kind = PolicyKind::kFcfs;
  c.checkpoint_then_evict = false;
  return c;
}

PolicyOptions KubernetesPolicy() {
  PolicyOptions c = HintAwareNoRulesPolicy();
  c.kind = PolicyKind::kKubernetes;
  c.checkpoint_then_evict = false;
  return c;
}

const std::vector<std::string>& PolicyPresetNames() {
  static const std::vector<std::string> names = {"fcfs", "k8s",           "k8s+runtime", "hint-norules", "hint-ckpt",
                                                 "hint", "hint-nodefrag", "hint-defrag", "hint-refill",
                                                 "hint-noreserve", "hint-noguard"};
  return names;
}

bool PolicyByName(const std::string& name, PolicyOptions* out) {
  PolicyOptions p;
  if (name == "fcfs")
    p = FcfsPolicy();
  else if (name == "k8s")
    p = KubernetesPolicy();
  else if (name == "k8s+runtime") {
    p = KubernetesPolicy();
    p.victim_grace = VictimGrace::kHintSized;
  } else if (name == "hint-norules")
    p = HintAwareNoRulesPolicy();
  else if (name == "hint")
    p = PolicyOptions();
  else if (name == "hint-ckpt") {  // checkpoint-then-evict only: no SIGTERM save, kill-now or tolerable-wait rules
    p.sigterm_save = false;
    p.kill_now_max_lost_s = 0;
    p.high_tolerable_wait = TolerableWait::kOff;
  } else if (name == "hint-nodefrag") {  // hint without moves of high jobs (defragmentation; off by default)
    p.defrag_max_moves = 0;
  } else if (name == "hint-defrag") {  // hint with moves of up to 4 smaller high jobs
    p.defrag_max_moves = 4;
  } else if (name == "hint-refill") {  // keep 15 % of the GPUs free for high priority, refilled in the background
    p.reserved_headroom = 0.15;
    p.reserved_headroom_without_medium = 0.15;
    p.refill_headroom = true;
    p.headroom_high_window_s = 0;
    p.headroom_low_restarts = false;
    p.headroom_low_wait_s = 0;
  } else if (name == "hint-noreserve") {  // hint without whole nodes kept for high priority
    p.reserved_nodes = 0;
  } else if (name == "hint-noguard") {  // hint without the high-wait guard
    p.high_wait_guard_s = 0;
  } else {
    return false;
  }
  *out = p;
  return true;
}

}  // namespace preempt::sched
