#!/bin/sh
# Test: a protocol run over several arrival jitters ends with a summary whose rows are the sums of
# the per-run target counts. Usage: check_summary.sh BENCH_SCHED
set -eu
bench=$1
out=$("$bench" --protocol tuning --protocol-only --no-capacity --protocol-jitter 0,1)
echo "$out" | awk '
  /traces meeting each target/ { runs++; k = 0; next }
  / \/ [0-9]+  \(target >= / { split($0, a, "/"); n = split(a[1], w, " "); met[k++] += w[n]; split(a[2], t, " "); traces_per_run = t[1]; next }
  /^   all / { all = $0 }
  END {
    if (runs != 2) { print "expected 2 runs, saw " runs; exit 1 }
    expect = sprintf("all %d %d %d %d %d %d %d", 2 * traces_per_run, met[0], met[1], met[2], met[3], met[4], met[5]);
    gsub(/ +/, " ", all); sub(/^ /, "", all);
    if (all != expect) { print "summary row \"" all "\", expected \"" expect "\""; exit 1 }
    print "summary ok: " all
  }'
