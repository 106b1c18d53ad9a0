// Structure-aware mode of the fuzzer (FUZZ_MODE=structured scripts/fuzz.sh): the fuzz input is a
// recipe, not a program. Its bytes choose a family of hostile shapes and their parameters, and
// the generator writes the program. Byte-level mutation of program text rarely produces a
// 150,000-clause cond or 2,000 nested lets; a recipe of a few bytes does, so coverage guidance
// explores the sizes and nestings where the runtime's bounds live:
//
//   flat    long flat forms: cond/case clauses, begin/and/or/list/vec/+ operands, let/let*/letrec
//           bindings, top-level and internal defines, lambda parameters, params, datum comments,
//           block comments, quoted lists and symbols, do variables, matrix rows
//   nest    deep nesting of every syntactic form (lists, if, let, let*, letrec, lambda, begin,
//           and, or, when, unless, cond, case, do, named let, loop, define, quote, dotted tails,
//           datum comments, block comments, vec, nested commutative operators, car/cdr chains)
//           at depths around the nesting limit (1,990-2,010) and far beyond it
//   arrays  huge shapes for every array constructor and linear-algebra primitive (sizes near
//           2^16, 2^31, 2^32, 2^53, negative, fractional, NaN), large literal arrays, and work
//           in loops (det/inv/solve/matmul of big matrices at every step)
//   runtime long and deep lists built at run time (returned, so the result is converted),
//           deep non-tail recursion, apply/append/equal?/map over long lists
//
// The rest of the input after the recipe bytes is spliced in as the innermost expression when
// the recipe asks for it, so mutations of ordinary program text still reach inside the shapes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace ndvm_fuzz {

class Recipe {
 public:
  Recipe(const uint8_t* data, size_t size) : d_(data), n_(size) {}
  uint8_t byte() { return i_ < n_ ? d_[i_++] : 0; }
  // A count spread over orders of magnitude, 0 .. 150,000 (a 150,000-clause cond runs in ~20 s
  // under ASan: scripts/fuzz.sh gives structured inputs a 60 s timeout).
  size_t count() {
    static const size_t kCounts[] = {0, 1, 2, 3, 7, 100, 1000, 4096, 10000, 30000, 65536, 150000};
    uint8_t b = byte();
    if (b < 0xC0) return kCounts[b % (sizeof kCounts / sizeof kCounts[0])];
    return static_cast<size_t>(b - 0xC0) * 997 + byte();  // anything in between
  }
  // A nesting depth: around the limit (2,000), small, or far beyond.
  size_t depth() {
    uint8_t b = byte();
    switch (b % 6) {
      case 0: return 1990 + byte() % 21;
      case 1: return byte() % 64;
      case 2: return 500 + byte() * 4;
      case 3: return 5000;
      case 4: return 100000;
      default: return 1000 + byte();
    }
  }
  // A size literal for array shapes: the boundaries of 16, 32 and 53 bits, odd values, non-integers.
  std::string size_literal() {
    static const char* const kSizes[] = {"0",
                                         "1",
                                         "2",
                                         "3",
                                         "17",
                                         "400",
                                         "1000",
                                         "46341",
                                         "65535",
                                         "65536",
                                         "65537",
                                         "2147483647",
                                         "2147483648",
                                         "4294967295",
                                         "4294967296",
                                         "4294967297",
                                         "9007199254740993",
                                         "-1",
                                         "-4294967296",
                                         "1e18",
                                         "1e308",
                                         "+inf.0",
                                         "+nan.0",
                                         "2.5",
                                         "9223372036854775807",
                                         "-9223372036854775808"};
    return kSizes[byte() % (sizeof kSizes / sizeof kSizes[0])];
  }
  // What is left of the input, as text (the innermost expression when the recipe splices it).
  std::string rest() {
    std::string s(reinterpret_cast<const char*>(d_ + i_), n_ - i_);
    i_ = n_;
    return s;
  }

 private:
  const uint8_t* d_;
  size_t n_, i_ = 0;
};

inline std::string repeat(const std::string& s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}

inline std::string leaf(Recipe& r) {
  static const char* const kLeaves[] = {"1",
                                        "x",
                                        "2.5",
                                        "'()",
                                        "(car '(1 2))",
                                        "(vec 1 2 3)",
                                        "#t",
                                        "(lambda (y) y)",
                                        "(+ x 1)",
                                        "'sym",
                                        "(mat (vec 1 2) (vec 3 4))",
                                        "k"};
  uint8_t b = r.byte();
  if (b == 0xFF) {
    std::string s = r.rest();
    return s.empty() ? "1" : s;
  }
  return kLeaves[b % (sizeof kLeaves / sizeof kLeaves[0])];
}

// ---- families ----------------------------------------------------------------------------------

inline std::string flat(Recipe& r) {
  const uint8_t kind = r.byte() % 20;
  const size_t n = r.count();
  const std::string e = leaf(r);
  std::string s;
  auto items = [&](const std::string& pre, const std::string& post) {
    for (size_t i = 0; i < n; ++i) s += pre + std::to_string(i) + post;
  };
  switch (kind) {
    case 0:
      s = "(define x 3) (cond ";
      items("((= x ", ") 1)");
      s += "(else " + e + "))";
      break;
    case 1:
      s = "(case 3 ";
      items("((", ") 1)");
      s += "(else " + e + "))";
      break;
    case 2: s = "(begin " + repeat("1 ", n) + e + ")"; break;
    case 3: s = "(and " + repeat("1 ", n) + e + ")"; break;
    case 4: s = "(or " + repeat("#f ", n) + e + ")"; break;
    case 5:
      s = "(let (";
      items("(a", " 1) ");
      s += ") " + e + ")";
      break;
    case 6:
      s = "(let* ((a0 1) ";
      for (size_t i = 1; i < n; ++i) s += "(a" + std::to_string(i) + " (+ a" + std::to_string(i - 1) + " 1)) ";
      s += ") " + e + ")";
      break;
    case 7:
      s = "(letrec (";
      items("(f", " (lambda () 1)) ");
      s += ") " + e + ")";
      break;
    case 8:
      items("(define d", " 1) ");
      s += e;
      break;
    case 9:
      s = "(define (f) ";
      items("(define d", " 1) ");
      s += e + ") (f)";
      break;
    case 10:
      s = "((lambda (";
      items("p", " ");
      s += ") " + e + ") " + repeat("1 ", n) + ")";
      break;
    case 11:
      items("(param q", " 0.5) ");
      s += e;
      break;
    case 12: s = repeat("#; 1 ", n) + e; break;
    case 13: s = repeat("#| c |# ", n) + e; break;
    case 14: s = "(length '(" + repeat("1 ", n) + "))"; break;
    case 15:
      s = "'(";
      items("s", " ");
      s += ")";
      break;
    case 16: s = "(list " + repeat("1.5 ", n) + e + ")"; break;
    case 17: s = "(vec " + repeat("1.5 ", n + 1) + ")"; break;
    case 18: s = "(+ " + repeat("x ", n) + e + ")"; break;
    default: s = "(mat " + repeat("(vec 1 2) ", n + 1) + ")"; break;
  }
  return s;
}

inline std::string nest(Recipe& r) {
  struct Form {
    const char* open;
    const char* close;
  };
  static const Form kForms[] = {{"(", ")"},
                                {"(if #t ", " 0)"},
                                {"(let ((x 1)) ", ")"},
                                {"(let* ((x 1)) ", ")"},
                                {"(letrec ((f 1)) ", ")"},
                                {"((lambda (x) ", ") 1)"},
                                {"(begin 1 ", ")"},
                                {"(and 1 ", ")"},
                                {"(or #f ", ")"},
                                {"(when #t ", ")"},
                                {"(unless #f ", ")"},
                                {"(cond (#t ", "))"},
                                {"(case 1 ((1) ", "))"},
                                {"(do ((i 0 (+ i 1))) ((= i 1) ", "))"},
                                {"(let lp ((i 0)) ", ")"},
                                {"(loop ((i 0)) ", ")"},
                                {"(let () (define v ", ") v)"},
                                {"'", ""},
                                {"'(1 . ", ")"},
                                {"#;(", ") 1"},
                                {"#| ", " |# 1"},
                                {"(vsum (vec ", "))"},
                                {"(+ 1 (* 2 ", "))"},
                                {"(car (list ", "))"},
                                {"(list ", ")"},
                                {"`(", ")"},
                                {"(lambda () ", ")"},
                                {"[", "]"}};
  const Form& f = kForms[r.byte() % (sizeof kForms / sizeof kForms[0])];
  const size_t d = r.depth();
  const std::string e = leaf(r);
  return repeat(f.open, d) + e + repeat(f.close, d);
}

inline std::string arrays(Recipe& r) {
  const std::string a = r.size_literal(), b = r.size_literal(), c = r.size_literal();
  switch (r.byte() % 18) {
    case 0: return "(zeros " + a + " " + b + ")";
    case 1: return "(ones " + a + ")";
    case 2: return "(eye " + a + ")";
    case 3: return "(outer (ones " + a + ") (ones " + b + "))";
    case 4: return "(matmul (ones " + a + " " + b + ") (ones " + b + " " + c + "))";
    case 5: return "(det (eye " + a + "))";
    case 6: return "(inv (eye " + a + "))";
    case 7: return "(solve (eye " + a + ") (ones " + a + "))";
    case 8: return "(cholesky (eye " + a + "))";
    case 9: return "(logdet (eye " + a + "))";
    case 10: return "(transpose (zeros " + a + " " + b + "))";
    case 11: return "(matvec (ones " + a + " " + b + ") (ones " + b + "))";
    case 12: return "(ref (zeros " + a + ") " + b + ")";
    case 13: return "(vsum (+ (ones " + a + " " + b + ") (ones " + b + ")))";
    case 14: return "(list->vec (vec->list (ones " + a + ")))";
    case 15: return "(do ((i 0 (+ i 1)) (s 0 (+ s (det (eye " + a + "))))) ((= i " + b + ") s))";
    case 16: return "(let lp ((i 0) (m (eye " + a + "))) (if (= i " + b + ") (trace m) (lp (+ i 1) (matmul m m))))";
    default: return "(dot (ones " + a + ") (ones " + b + "))";
  }
}

inline std::string runtime(Recipe& r) {
  const std::string n = std::to_string(r.count());
  switch (r.byte() % 10) {
    case 0: return "(let lp ((i 0) (acc '())) (if (= i " + n + ") acc (lp (+ i 1) (cons i acc))))";
    case 1: return "(let lp ((i 0) (acc '())) (if (= i " + n + ") acc (lp (+ i 1) (list acc))))";
    case 2: return "(let lp ((i 0) (acc 1)) (if (= i " + n + ") acc (lp (+ i 1) (cons acc 1))))";
    case 3: return "(define (f i) (if (= i 0) 0 (+ 1 (f (- i 1))))) (f " + n + ")";
    case 4: return "(define (mk i a) (if (= i 0) a (mk (- i 1) (cons i a)))) (apply + (mk " + n + " '()))";
    case 5: return "(define (mk i a) (if (= i 0) a (mk (- i 1) (list a)))) (equal? (mk " + n + " 1) (mk " + n + " 1))";
    case 6:
      return "(define (mk i a) (if (= i 0) a (mk (- i 1) (cons i a)))) (length (map + (mk " + n + " '()) (mk " + n +
             " '())))";
    case 7: return "(let lp ((i 0) (l '(1))) (if (= i " + n + ") (length l) (lp (+ i 1) (append l l))))";
    case 8: return "(define (mk i a) (if (= i 0) a (mk (- i 1) (cons (vec i) a)))) (mk " + n + " '())";
    default:
      return "(let lp ((i 0) (v (vec 1))) (if (= i " + n +
             ") (size v) (lp (+ i 1) (list->vec (append (vec->list v) (vec->list v))))))";
  }
}

// The program a recipe describes.
inline std::string generate(const uint8_t* data, size_t size) {
  Recipe r(data, size);
  switch (r.byte() % 4) {
    case 0: return flat(r);
    case 1: return nest(r);
    case 2: return arrays(r);
    default: return runtime(r);
  }
}

}  // namespace ndvm_fuzz
