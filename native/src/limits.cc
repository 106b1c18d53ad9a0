// Limits accounting: what one evaluation may use (Limits: memory, work, steps, wall clock), what
// it has used, and the LimitError naming the exceeded budget and where. The checks on hot paths
// (charge, charge_op, check_budgets, alloc_num) are inline in vm.h; these are their slow paths.
#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>

#include "error.h"
#include "vm.h"

namespace ndvm {

uint64_t VM::bytes_in_use() const {
  // guard masks: one byte per lane per recorded decision (256 lanes make them larger than the tape)
  return pay_top * sizeof(double) + heap.used() + tape.size() * sizeof(TapeRec) + targs.size() * sizeof(NumRef) +
         guard_masks.size();
}

void VM::check_memory(const Node* site) {
  if (bytes_in_use() > lim->max_bytes) memory_error(site, 0);
}

namespace {
std::string mib(uint64_t bytes) {
  if (bytes >= (1ull << 40)) return std::to_string(bytes >> 30) + " GiB";
  return std::to_string((bytes + (1u << 20) - 1) >> 20) + " MiB";
}
std::string site_prefix(const Node* site) { return site && !site->name.empty() ? "'" + site->name + "': " : ""; }
}  // namespace

// The arena addresses numbers by 32-bit offsets: at most this many values per run, whatever the
// memory budget (32 GiB of payload).
constexpr uint64_t kMaxArenaValues = 0xFFFFFFF0ull;

void VM::grow_for(uint64_t n, const Node* site) {
  if (!site) site = op_site;
  if (n > kMaxArenaValues - pay_top)  // also a size that overflowed 64 bits (n = UINT64_MAX)
    limit_error(site_prefix(site) + "array too large: " +
                    (n == UINT64_MAX ? std::string("its size overflows 64 bits") : std::to_string(n) + " values") +
                    " (an evaluation holds at most " + std::to_string(kMaxArenaValues) +
                    " numbers, 32 GiB; memory budget Limits.max_bytes=" + mib(lim->max_bytes) + ")",
                site ? site->line : 0, site ? site->col : 0);
  if (bytes_in_use() + n * sizeof(double) > lim->max_bytes) memory_error(site, n * sizeof(double));
  grow_payload(pay_top + n);
}

void VM::memory_error(const Node* site, uint64_t more_bytes) {
  std::string need;
  if (more_bytes)
    need = ": " + (site && !site->name.empty() ? "'" + site->name + "'" : std::string("the program")) + " needs " +
           mib(more_bytes) + " more, with " + mib(bytes_in_use()) + " in use";
  limit_error("memory budget (max_bytes=" + mib(lim->max_bytes) + " per evaluation) exceeded" + need +
                  "; raise Limits.max_bytes if the program really needs more",
              site ? site->line : 0, site ? site->col : 0);
}

double* VM::scratch_grow(uint64_t doubles, uint64_t ints, const Node* site) {
  uint64_t bytes;
  if (__builtin_mul_overflow(doubles, uint64_t(sizeof(double)), &bytes) ||
      __builtin_add_overflow(bytes, ints * sizeof(int), &bytes))
    bytes = UINT64_MAX;
  if (bytes > lim->max_bytes || bytes_in_use() + bytes > lim->max_bytes) memory_error(site ? site : op_site, bytes);
  if (scratch.size() < doubles) scratch.resize(doubles);
  if (pivots_.size() < ints) pivots_.resize(ints);
  return scratch.data();
}

void VM::begin_evaluation(const Limits& l) {
  lim = &l;
  work = 0;
  pay_top = 0;  // the previous evaluation's arena is not this one's work (reset or a replay rewinds it)
  has_deadline_ = l.max_seconds > 0;
  if (has_deadline_) {
    start_ = std::chrono::steady_clock::now();
    // a limit beyond a century is no limit (and would overflow the clock's representation)
    double s = std::min(l.max_seconds, 3.0e9);
    deadline_ =
        start_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
  }
}

void VM::work_error(const Node* site) {
  if (!site) site = op_site;
  limit_error(site_prefix(site) + "work budget (max_work=" + std::to_string(lim->max_work) +
                  " element operations) exceeded; raise Limits.max_work if the program really needs more",
              site ? site->line : 0, site ? site->col : 0);
}

void VM::clock_error(const Node* site) {
  char took[32];
  std::snprintf(took, sizeof took, "%.2f",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  std::ostringstream o;
  o << "wall-clock limit (max_seconds=" << lim->max_seconds << ") exceeded after " << took
    << " s; raise or unset Limits.max_seconds if the program really needs longer";
  limit_error(o.str(), site ? site->line : 0, site ? site->col : 0);
}

void VM::step_checkpoint(const Node* n) {
  if (steps > lim->max_steps)
    limit_error("step budget (max_steps=" + std::to_string(lim->max_steps) + ") exceeded: an infinite loop?", n->line,
                n->col);
  check_budgets(n);
  step_check = std::min(lim->max_steps, steps + kCheckEvery);
}

}  // namespace ndvm
