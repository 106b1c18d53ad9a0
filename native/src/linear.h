// Variable projection (calibrate's solve_linear): the parameters that enter a program's result
// affinely, found once at compile time, and the small least-squares solve that gives their best
// values for the other parameters' current values. optim.cc and program.cc (the loss of a
// projected batch) use them; docs/runtime.md, "Linear parameters solved", describes the method.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ndvm {

struct Program;
struct Datum;

// The free (unconstrained, not shared) parameters in which the program's result is jointly affine:
// result = a(others) + sum_j theta_j * b_j(others). Found on the result expression (the last form of
// the top level) through + - * / only: a parameter must sit there as a term or a factor of a term,
// and occur nowhere else in the program. Conservative: a parameter it leaves out may still be
// linear (behind a define, a let or a call); one it names always is. Ascending indices.
std::vector<int> find_linear_params(const Program& p);

// The basis program of p (compiled from `forms`, its read source): the same declarations and
// defines, and as result the list (a b_1 ... b_k) of the split result = a + sum_j theta_j b_j over
// p.linear_params (in their order), so that one walk gives every column a projected calibration
// needs. "" when the result cannot be split so (calibration then searches every parameter).
std::string basis_source(const Program& p, const std::vector<std::shared_ptr<Datum>>& forms);

// Least squares over n points: the k coefficients c minimising
//   sum_e (t_e - x_0(e) - sum_j c_j x_{j+1}(e))^2,   x_j(e) = base[j][e * stride[j]]
// (stride 0: one value for every point). Normal equations in one pass over the points, scaled to
// a unit diagonal and solved by Cholesky; a column whose pivot falls below 1e-12 of its norm (a
// basis that repeats others, or vanishes) gets c_j = 0. False when a value is not finite.
// `gram` is scratch, resized as needed.
bool solve_normal_equations(uint32_t n, int k, const double* const* base, const size_t* stride, const double* t,
                            std::vector<double>& gram, double* c);

}  // namespace ndvm
