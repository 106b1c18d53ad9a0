// Typed errors of the runtime. Every failure of a program is one of these four kinds (plus the
// internal Divergence signal, which never escapes the evaluation driver).
#pragma once
#include <stdexcept>
#include <string>
#include <vector>

namespace ndvm {

enum class ErrorKind { Parse, Check, Eval, Limit };

struct Error : std::runtime_error {
  ErrorKind kind;
  int line, col;  // 1-based; 0 when unknown
  Error(ErrorKind k, std::string msg, int line_ = 0, int col_ = 0)
      : std::runtime_error(std::move(msg)), kind(k), line(line_), col(col_) {}
};

[[noreturn]] inline void parse_error(const std::string& m, int l, int c) { throw Error(ErrorKind::Parse, m, l, c); }
[[noreturn]] inline void check_error(const std::string& m, int l, int c) { throw Error(ErrorKind::Check, m, l, c); }
[[noreturn]] inline void eval_error(const std::string& m, int l = 0, int c = 0) {
  throw Error(ErrorKind::Eval, m, l, c);
}
[[noreturn]] inline void limit_error(const std::string& m, int l = 0, int c = 0) {
  throw Error(ErrorKind::Limit, m, l, c);
}

// Raised when lanes of one group disagree on a comparison. The driver splits the group by `mask`
// (1 = the comparison was true in that lane) and re-runs each part; see program.cc.
struct Divergence {
  std::vector<uint8_t> mask;
};

}  // namespace ndvm
