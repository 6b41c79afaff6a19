#!/usr/bin/env bash
# The measured pipeline bubble on 4 ranks against each schedule's formula, with the tight
# tolerance (|measured - formula| <= 0.05 + 0.15 x formula per rank) that the test suite leaves
# out because load on the machine breaks it (src/tenax/parallel/pipeline_test.cc explains the
# method). Run it on an idle machine after ./scripts/build; prints the table and exits non-zero
# when a schedule is off.
set -euo pipefail
cd "$(dirname "$0")/.."
TENAX_TIMING_CHECKS=1 exec build/tests/tenax_parallel_tests \
  --gtest_filter=Pipeline.FourRanksIdleFractionMatchesSchedule "$@"
