// The special-form table, in the manner of prims.h: one line per keyword of the language with
// whether the compiler supports it. The compiler dispatches on the enum in one switch
// (compiler.cc, Compiler::form), so a form added here without a case there is a -Wswitch warning;
// the Python binding exports the table (ndvm.language.SPECIAL_FORMS), so the proposers' static
// checks read it rather than keep a list of their own.
//
// Supported forms compile (some only in certain positions: define at the top or the start of a
// body, param at the top, recur in the tail of a loop). Reserved ones are Scheme keywords the
// language refuses with a CheckError naming them, so that a program using them fails at compile
// time instead of calling an unknown procedure.
#pragma once
#include <string>

// clang-format off
#define NDVM_FORMS(X)                                                                          \
  X(QUOTE, "quote", true) X(IF, "if", true) X(DEFINE, "define", true) X(LAMBDA, "lambda", true) \
  X(LET, "let", true) X(LET_STAR, "let*", true) X(LETREC, "letrec", true)                     \
  X(LETREC_STAR, "letrec*", true) X(BEGIN, "begin", true) X(COND, "cond", true)               \
  X(CASE, "case", true) X(AND, "and", true) X(OR, "or", true) X(WHEN, "when", true)           \
  X(UNLESS, "unless", true) X(DO, "do", true) X(LOOP, "loop", true) X(RECUR, "recur", true)   \
  X(PARAM, "param", true)                                                                     \
  /* reserved: refused with a CheckError */                                                   \
  X(SET, "set!", false) X(NAMED_LAMBDA, "named-lambda", false)                                \
  X(DEFINE_SYNTAX, "define-syntax", false) X(LET_VALUES, "let-values", false)                 \
  X(QUASIQUOTE, "quasiquote", false) X(DELAY, "delay", false) X(GUARD, "guard", false)
// clang-format on

namespace ndvm {

enum FormId : int {
#define NDVM_FORM_ENUM(id, name, supported) F_##id,
  NDVM_FORMS(NDVM_FORM_ENUM)
#undef NDVM_FORM_ENUM
      F_COUNT
};

struct FormInfo {
  const char* name;
  bool supported;
};

extern const FormInfo kForms[F_COUNT];

// -1 when `name` is not a special-form keyword
int find_form(const std::string& name);

}  // namespace ndvm
