#!/usr/bin/env bash
# callgrind before (issue-15 sitting 1, "merged") and after (this sitting, "s2"), text then tool
set -uo pipefail
cd /work/prof
for scen in text tool; do
  for impl in merged s2; do
    MOCKX="" SCEN=$scen SUF=-s2run-$scen bash /work/prof/cg2.sh $impl > /work/prof/run-$impl-$scen.log 2>&1
    echo "$impl $scen done"
  done
done
