#!/usr/bin/env bash
# Coverage-guided fuzzing of the NDVM runtime (reader, checker, compiler, VM, reverse mode) with
# libFuzzer under AddressSanitizer + UndefinedBehaviorSanitizer.
#
#   scripts/fuzz.sh                  build, then fuzz for FUZZ_SECONDS (default 60)
#   FUZZ_SECONDS=600 scripts/fuzz.sh
#   scripts/fuzz.sh --build-only
#   scripts/fuzz.sh crash-<sha1>     reproduce one input (runs it once and exits)
#   FUZZ_KEEP_GOING=1 scripts/fuzz.sh   fork mode: record every crash and keep fuzzing (triage runs)
#
# Needs clang with the libFuzzer runtime (Debian: apt-get install clang-14 libclang-rt-14-dev).
# The seed corpus is native/fuzz/corpus (committed); new inputs libFuzzer finds go to
# build/fuzz/corpus (not committed); crashes are written to build/fuzz/artifacts/ and the script
# exits non-zero. The run's statistics end in build/fuzz/last_run.log.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/build/fuzz"
FUZZ_SECONDS="${FUZZ_SECONDS:-60}"

find_clang() {
  for c in "${CXX_FUZZ:-}" clang++ clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++-14; do
    if [[ -n "$c" ]] && command -v "$c" >/dev/null 2>&1; then echo "$c"; return 0; fi
  done
  return 1
}

CXX="$(find_clang)" || {
  echo "fuzz.sh: no clang++ found; install clang and its libFuzzer runtime (e.g. apt-get install clang-14 libclang-rt-14-dev)" >&2
  exit 2
}

mkdir -p "$OUT/obj" "$OUT/corpus" "$OUT/artifacts"
# The evaluator runs on a private stack (makecontext/swapcontext) and tells ASan about the switch
# only when __SANITIZE_ADDRESS__ is defined, which GCC does and clang (before 17) does not; without
# the annotations every exception thrown on that stack leaves stale poison and ASan reports false
# stack overflows. So it is defined here for clang.
FLAGS=(-std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined
       -fno-sanitize-recover=undefined -D__SANITIZE_ADDRESS__=1 -I"$ROOT/native/src")

# Incremental build: one object per runtime source, rebuilt when the source, a header or the flags changed.
if [[ "$(cat "$OUT/obj/flags" 2>/dev/null)" != "${FLAGS[*]}" ]]; then rm -f "$OUT"/obj/*.o; echo "${FLAGS[*]}" >"$OUT/obj/flags"; fi
objs=()
newest_header=$(stat -c %Y "$ROOT"/native/src/*.h | sort -n | tail -1)
for src in "$ROOT"/native/src/*.cc "$ROOT"/native/fuzz/fuzz_ndvm.cc; do
  obj="$OUT/obj/$(basename "${src%.cc}").o"
  if [[ ! -f "$obj" || "$src" -nt "$obj" || $(stat -c %Y "$obj") -lt $newest_header ]]; then
    echo "fuzz.sh: compiling $(basename "$src")"
    "$CXX" "${FLAGS[@]}" -c "$src" -o "$obj" &
  fi
  objs+=("$obj")
done
wait
"$CXX" -fsanitize=fuzzer,address,undefined "${objs[@]}" -lpthread -o "$OUT/fuzz_ndvm"
echo "fuzz.sh: built $OUT/fuzz_ndvm with $("$CXX" --version | head -1)"

if [[ "${1:-}" == "--build-only" ]]; then exit 0; fi

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

if [[ $# -ge 1 ]]; then  # reproduce given inputs
  exec "$OUT/fuzz_ndvm" "$@"
fi

echo "fuzz.sh: fuzzing for ${FUZZ_SECONDS}s"
extra=()
if [[ "${FUZZ_KEEP_GOING:-0}" == 1 ]]; then extra=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1); fi
before=$(ls "$OUT/artifacts" | wc -l)
set +e
"$OUT/fuzz_ndvm" \
  -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2560 -max_len=2048 \
  -dict="$ROOT/native/fuzz/ndvm.dict" -artifact_prefix="$OUT/artifacts/" \
  -print_final_stats=1 "${extra[@]}" \
  "$OUT/corpus" "$ROOT/native/fuzz/corpus" 2>&1 | tee "$OUT/last_run.log" | grep -E "^#[0-9]+.*(pulse|DONE)|ERROR|SUMMARY|stat::|Done" 
status=${PIPESTATUS[0]}
set -e
after=$(ls "$OUT/artifacts" | wc -l)
if [[ $status -eq 0 && $after -gt $before ]]; then
  echo "fuzz.sh: $((after - before)) new crash/timeout inputs in $OUT/artifacts/" >&2
  status=1
fi
if [[ $status -ne 0 ]]; then
  echo "fuzz.sh: FAILED (exit $status); see $OUT/last_run.log and $OUT/artifacts/" >&2
  exit "$status"
fi
echo "fuzz.sh: no crash in ${FUZZ_SECONDS}s; $(grep -E 'stat::number_of_executed_units' "$OUT/last_run.log" | tail -1)"
