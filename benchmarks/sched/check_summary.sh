#!/bin/sh
# Test: a protocol run over several arrival jitters ends with a summary whose rows are the sums of
# the per-run target counts, and each run's whole-set line sums (low starved, preemptions + moves)
# or takes the largest (most-preempted job) of its per-trace columns, in the printed table and in
# the --json file, and counts the same whole-node high jobs for every policy. Usage: check_summary.sh BENCH_SCHED
set -eu
bench=$1
json=$(mktemp)
trap 'rm -f "$json"' EXIT
out=$("$bench" --protocol tuning --protocol-only --no-capacity --protocol-jitter 0,1 --json "$json")
/usr/bin/python3 - "$json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["protocol_only"] and len(d["protocol"]) == 2, "expected two protocol runs in the JSON"
for run in d["protocol"]:
    for who in ("policy", "k8s", "k8s_runtime"):
        m = [t["k8s_runtime" if who == "k8s_runtime" else who] for t in run["traces"]]
        w = run["whole_set"][who]
        want = {"low_starved_delay": sum(x["low_starved_delay"] for x in m),
                "preemptions_and_moves": sum(x["preemptions"] + x["moves"] for x in m),
                "repreemptions": sum(x["repreemptions"] for x in m),
                "most_preempted_job": max(x["preemptions_per_job_max"] for x in m)}
        for k, v in want.items():
            assert w[k] == v, "jitter %s, %s: whole_set %s = %s, per-trace columns give %s" % (run["jitter_s"], who, k, w[k], v)
        assert abs(w["lost_gpu_hours"] - sum(x["lost_gpu_hours"] for x in m)) < 0.01
        assert w["whole_node_high_mean_wait_h"] >= 0, "negative whole-node high wait"
    # The whole-node high jobs are the trace's, the same for every policy (jitter moves arrivals only).
    counts = {run["whole_set"][who]["whole_node_high_jobs"] for who in ("policy", "k8s", "k8s_runtime")}
    assert len(counts) == 1 and counts.pop() > 0, "whole-node high job counts differ or are 0: %s" % counts
assert len(d["targets"]) == 12, "expected 6 targets per run"
PY
echo "$out" | awk '
  /^== protocol, / { for (p = 0; p < 3; ++p) { starved[p] = 0; pre[p] = 0; most[p] = 0 } next }
  / jobs +[0-9]+ GPUs \| / {
    split($0, col, "|");
    split(col[4], s, " "); split(col[5], m, " "); split(col[6], q, " ");
    for (p = 0; p < 3; ++p) { starved[p] += s[p + 1]; pre[p] += q[p + 1]; if (m[p + 1] > most[p]) most[p] = m[p + 1] }
    next
  }
  /traces meeting each target/ { runs++; k = 0; next }
  / \/ [0-9]+  \(target >= / { split($0, a, "/"); n = split(a[1], w, " "); met[k++] += w[n]; split(a[2], t, " "); traces_per_run = t[1]; next }
  /whole set/ {
    wholes++;
    want = sprintf("low starved %d / %d / %d", starved[0], starved[1], starved[2]);
    if (index($0, want) == 0) { print "whole-set line lacks \"" want "\": " $0; bad = 1 }
    want = sprintf("preemptions+moves %d / %d / %d", pre[0], pre[1], pre[2]);
    if (index($0, want) == 0) { print "whole-set line lacks \"" want "\": " $0; bad = 1 }
    want = sprintf("most-preempted job %d / %d / %d", most[0], most[1], most[2]);
    if (index($0, want) == 0) { print "whole-set line lacks \"" want "\": " $0; bad = 1 }
    next
  }
  /^   all / { all = $0 }
  END {
    if (bad) exit 1
    if (runs != 2 || wholes != 2) { print "expected 2 runs with a whole-set line each, saw " runs " and " wholes; exit 1 }
    expect = sprintf("all %d %d %d %d %d %d %d", 2 * traces_per_run, met[0], met[1], met[2], met[3], met[4], met[5]);
    gsub(/ +/, " ", all); sub(/^ /, "", all);
    if (all != expect) { print "summary row \"" all "\", expected \"" expect "\""; exit 1 }
    print "summary ok: " all
  }'
