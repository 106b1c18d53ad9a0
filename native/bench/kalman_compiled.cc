// kalman_compiled: the hand-written ceiling for the kalman2d_T80 benchmark.
//
// Value and gradient of the negative log-likelihood of a 2-D local-level Kalman filter
// (F = H = I, Q = q I, R = r I, x0 = 0, P0 = I), for B parameter lanes at once. Reverse mode is
// written by hand: the forward pass stores (x_t, P_t) per step, the backward pass recomputes the
// step's intermediates and propagates adjoints. Storage is lane-minor (each scalar of the state is
// an array of B doubles), so every step is a loop over lanes that the compiler can vectorize; the
// only libm call (log det S) sits in its own loop so it does not block vectorization of the rest.
//
// It computes exactly what the NDVM program computes:
//   per step  Pp = P + qI, S = Pp + rI, e = y - x, Si = S^-1, K = Pp Si,
//             x <- x + K e, P <- (I - K) Pp, nll += log det S + e' Si e.
//
// Usage: kalman_compiled [--min-seconds S] [--reps N] < input
//   input: "T B" on the first line, then T lines "y0 y1", then B lines "q r".
//   output: one JSON object: timing (median and best seconds per value-and-gradient call for all B
//   lanes, ns per lane) and, for checking, the values [B] and gradients [B][2] of the last call.
// Build: c++ -O3 -std=c++17 kalman_compiled.cc -o kalman_compiled (the bench suite does this;
// the same -O3 without -ffast-math that the NDVM runtime uses).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Lanes {  // structure of arrays: one array of B doubles per scalar
  explicit Lanes(int n, int B) : data(static_cast<size_t>(n) * B, 0.0), B(B) {}
  double* operator[](int k) { return data.data() + static_cast<size_t>(k) * B; }
  std::vector<double> data;
  int B;
};

// One forward step for all lanes (restrict parameters let the compiler vectorize over lanes).
void forward_step(int B, double y0, double y1, const double* __restrict q, const double* __restrict r,
                  const double* __restrict x0, const double* __restrict x1, const double* __restrict p00,
                  const double* __restrict p01, const double* __restrict p10, const double* __restrict p11,
                  double* __restrict nx0, double* __restrict nx1, double* __restrict n00, double* __restrict n01,
                  double* __restrict n10, double* __restrict n11, double* __restrict det, double* __restrict values) {
  for (int b = 0; b < B; ++b) {
    const double a00 = p00[b] + q[b], a01 = p01[b], a10 = p10[b], a11 = p11[b] + q[b];  // Pp
    const double s00 = a00 + r[b], s01 = a01, s10 = a10, s11 = a11 + r[b];              // S
    const double d = s00 * s11 - s01 * s10;
    const double i00 = s11 / d, i01 = -s01 / d, i10 = -s10 / d, i11 = s00 / d;  // Si
    const double e0 = y0 - x0[b], e1 = y1 - x1[b];
    const double k00 = a00 * i00 + a01 * i10, k01 = a00 * i01 + a01 * i11;  // K = Pp Si
    const double k10 = a10 * i00 + a11 * i10, k11 = a10 * i01 + a11 * i11;
    nx0[b] = x0[b] + (k00 * e0 + k01 * e1);
    nx1[b] = x1[b] + (k10 * e0 + k11 * e1);
    const double m00 = 1.0 - k00, m01 = -k01, m10 = -k10, m11 = 1.0 - k11;  // I - K
    n00[b] = m00 * a00 + m01 * a10;
    n01[b] = m00 * a01 + m01 * a11;
    n10[b] = m10 * a00 + m11 * a10;
    n11[b] = m10 * a01 + m11 * a11;
    const double si_e0 = i00 * e0 + i01 * e1, si_e1 = i10 * e0 + i11 * e1;
    values[b] += e0 * si_e0 + e1 * si_e1;
    det[b] = d;
  }
}

// One backward step for all lanes: recompute the step from (x_t, P_t), then propagate adjoints.
void backward_step(int B, double y0, double y1, const double* __restrict q, const double* __restrict r,
                   const double* __restrict x0, const double* __restrict x1, const double* __restrict p00,
                   const double* __restrict p01, const double* __restrict p10, const double* __restrict p11,
                   double* __restrict gx0, double* __restrict gx1, double* __restrict g00, double* __restrict g01,
                   double* __restrict g10, double* __restrict g11, double* __restrict gq, double* __restrict gr) {
  for (int b = 0; b < B; ++b) {
    // recompute the step
    const double a00 = p00[b] + q[b], a01 = p01[b], a10 = p10[b], a11 = p11[b] + q[b];
    const double s00 = a00 + r[b], s01 = a01, s10 = a10, s11 = a11 + r[b];
    const double d = s00 * s11 - s01 * s10;
    const double i00 = s11 / d, i01 = -s01 / d, i10 = -s10 / d, i11 = s00 / d;
    const double e0 = y0 - x0[b], e1 = y1 - x1[b];
    const double k00 = a00 * i00 + a01 * i10, k01 = a00 * i01 + a01 * i11;
    const double k10 = a10 * i00 + a11 * i10, k11 = a10 * i01 + a11 * i11;
    const double m00 = 1.0 - k00, m01 = -k01, m10 = -k10, m11 = 1.0 - k11;
    // adjoints flowing in: gx' (gx*), gP' (g**), and 1 for nll
    const double hx0 = gx0[b], hx1 = gx1[b];
    const double h00 = g00[b], h01 = g01[b], h10 = g10[b], h11 = g11[b];
    // nll += log det S  ->  gS = Si^T
    double gs00 = i00, gs01 = i10, gs10 = i01, gs11 = i11;
    // nll += e' Si e  ->  ge = (Si + Si^T) e, gSi = e e^T
    double ge0 = (i00 + i00) * e0 + (i01 + i10) * e1;
    double ge1 = (i10 + i01) * e0 + (i11 + i11) * e1;
    double gi00 = e0 * e0, gi01 = e0 * e1, gi10 = e1 * e0, gi11 = e1 * e1;
    // x' = x + K e  ->  gK = gx' e^T, ge += K^T gx'
    double gk00 = hx0 * e0, gk01 = hx0 * e1, gk10 = hx1 * e0, gk11 = hx1 * e1;
    ge0 += k00 * hx0 + k10 * hx1;
    ge1 += k01 * hx0 + k11 * hx1;
    // P' = M Pp with M = I - K  ->  gM = gP' Pp^T (gK -= gM), gPp = M^T gP'
    gk00 -= h00 * a00 + h01 * a01;
    gk01 -= h00 * a10 + h01 * a11;
    gk10 -= h10 * a00 + h11 * a01;
    gk11 -= h10 * a10 + h11 * a11;
    double ga00 = m00 * h00 + m10 * h10, ga01 = m00 * h01 + m10 * h11;
    double ga10 = m01 * h00 + m11 * h10, ga11 = m01 * h01 + m11 * h11;
    // K = Pp Si  ->  gPp += gK Si^T, gSi += Pp^T gK
    ga00 += gk00 * i00 + gk01 * i01;
    ga01 += gk00 * i10 + gk01 * i11;
    ga10 += gk10 * i00 + gk11 * i01;
    ga11 += gk10 * i10 + gk11 * i11;
    gi00 += a00 * gk00 + a10 * gk10;
    gi01 += a00 * gk01 + a10 * gk11;
    gi10 += a01 * gk00 + a11 * gk10;
    gi11 += a01 * gk01 + a11 * gk11;
    // Si = S^-1  ->  gS -= Si^T gSi Si^T
    const double u00 = i00 * gi00 + i10 * gi10, u01 = i00 * gi01 + i10 * gi11;  // Si^T gSi
    const double u10 = i01 * gi00 + i11 * gi10, u11 = i01 * gi01 + i11 * gi11;
    gs00 -= u00 * i00 + u01 * i01;
    gs01 -= u00 * i10 + u01 * i11;
    gs10 -= u10 * i00 + u11 * i01;
    gs11 -= u10 * i10 + u11 * i11;
    // S = Pp + r I, Pp = P + q I, e = y - x
    ga00 += gs00;
    ga01 += gs01;
    ga10 += gs10;
    ga11 += gs11;
    gr[b] += gs00 + gs11;
    gq[b] += ga00 + ga11;
    gx0[b] = hx0 - ge0;
    gx1[b] = hx1 - ge1;
    g00[b] = ga00;
    g01[b] = ga01;
    g10[b] = ga10;
    g11[b] = ga11;
  }
}

class Kalman2D {
 public:
  Kalman2D(std::vector<double> ys, int T, int B)
      : ys_(std::move(ys)), T_(T), B_(B), states_(6 * (T + 1), B), det_(1, B) {}

  // values[b] = nll, grads[b*2 + {0,1}] = d nll / d {q, r}
  void value_and_grad(const double* __restrict q, const double* __restrict r, double* __restrict values,
                      double* __restrict grads) {
    const int B = B_;
    // ---- forward: x (2) and P (4, row-major) per step, lane-minor ----
    for (int k = 0; k < 6; ++k) {
      double* s = states_[k];
      const double init = (k == 2 || k == 5) ? 1.0 : 0.0;  // x = 0, P = I
      for (int b = 0; b < B; ++b) s[b] = init;
    }
    for (int b = 0; b < B; ++b) values[b] = 0.0;
    for (int t = 0; t < T_; ++t) {
      const double y0 = ys_[2 * t], y1 = ys_[2 * t + 1];
      const double* __restrict x0 = states_[6 * t + 0];
      const double* __restrict x1 = states_[6 * t + 1];
      const double* __restrict p00 = states_[6 * t + 2];
      const double* __restrict p01 = states_[6 * t + 3];
      const double* __restrict p10 = states_[6 * t + 4];
      const double* __restrict p11 = states_[6 * t + 5];
      double* __restrict nx0 = states_[6 * (t + 1) + 0];
      double* __restrict nx1 = states_[6 * (t + 1) + 1];
      double* __restrict n00 = states_[6 * (t + 1) + 2];
      double* __restrict n01 = states_[6 * (t + 1) + 3];
      double* __restrict n10 = states_[6 * (t + 1) + 4];
      double* __restrict n11 = states_[6 * (t + 1) + 5];
      double* __restrict det = det_[0];
      forward_step(B, y0, y1, q, r, x0, x1, p00, p01, p10, p11, nx0, nx1, n00, n01, n10, n11, det, values);
      for (int b = 0; b < B; ++b) values[b] += std::log(det[b]);
    }
    // ---- backward: adjoints of x (2) and P (4); the final state does not reach nll ----
    std::vector<double> adj(static_cast<size_t>(8) * B, 0.0);
    double* __restrict gx0 = adj.data();
    double* __restrict gx1 = gx0 + B;
    double* __restrict g00 = gx1 + B;
    double* __restrict g01 = g00 + B;
    double* __restrict g10 = g01 + B;
    double* __restrict g11 = g10 + B;
    double* __restrict gq = g11 + B;
    double* __restrict gr = gq + B;
    for (int t = T_ - 1; t >= 0; --t) {
      const double y0 = ys_[2 * t], y1 = ys_[2 * t + 1];
      const double* __restrict x0 = states_[6 * t + 0];
      const double* __restrict x1 = states_[6 * t + 1];
      const double* __restrict p00 = states_[6 * t + 2];
      const double* __restrict p01 = states_[6 * t + 3];
      const double* __restrict p10 = states_[6 * t + 4];
      const double* __restrict p11 = states_[6 * t + 5];
      backward_step(B, y0, y1, q, r, x0, x1, p00, p01, p10, p11, gx0, gx1, g00, g01, g10, g11, gq, gr);
    }
    for (int b = 0; b < B; ++b) {
      grads[2 * b] = gq[b];
      grads[2 * b + 1] = gr[b];
    }
  }

 private:
  std::vector<double> ys_;
  int T_, B_;
  Lanes states_;
  Lanes det_;
};

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "kalman_compiled: %s\n", msg.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  double min_seconds = 0.2;
  long reps = 0;  // 0: as many as fit in min_seconds
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--min-seconds") && i + 1 < argc) min_seconds = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atol(argv[++i]);
    else die(std::string("unknown argument ") + argv[i]);
  }
  int T = 0, B = 0;
  if (std::scanf("%d %d", &T, &B) != 2 || T <= 0 || B <= 0) die("expected 'T B' on the first line");
  std::vector<double> ys(2 * static_cast<size_t>(T));
  for (auto& y : ys)
    if (std::scanf("%lf", &y) != 1) die("expected T lines of two observations");
  std::vector<double> q(B), r(B);
  for (int b = 0; b < B; ++b)
    if (std::scanf("%lf %lf", &q[b], &r[b]) != 2) die("expected B lines 'q r'");

  Kalman2D kf(ys, T, B);
  std::vector<double> values(B), grads(2 * static_cast<size_t>(B));
  using clock = std::chrono::steady_clock;
  auto seconds_since = [](clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); };
  // Warm-up, and the size of a timing sample: calls are grouped so that one sample lasts at least
  // ~50 microseconds (well above the clock's resolution).
  kf.value_and_grad(q.data(), r.data(), values.data(), grads.data());
  auto t_warm = clock::now();
  kf.value_and_grad(q.data(), r.data(), values.data(), grads.data());
  const double one = seconds_since(t_warm);
  const long group = one > 0 ? std::max(1L, static_cast<long>(50e-6 / one)) : 1000;
  // Samples until min_seconds are spent (or reps calls made). The median describes a loaded
  // machine, the best sample the code itself (other processes only ever add time).
  std::vector<double> samples;
  long done = 0;
  const auto start = clock::now();
  do {
    const auto t0 = clock::now();
    for (long g = 0; g < group; ++g) kf.value_and_grad(q.data(), r.data(), values.data(), grads.data());
    samples.push_back(seconds_since(t0) / group);
    done += group;
  } while (reps ? done < reps : seconds_since(start) < min_seconds || samples.size() < 3);

  std::vector<double> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  const double best = sorted.front();
  std::printf(
      "{\"T\": %d, \"B\": %d, \"reps\": %ld, \"samples\": %zu, \"seconds_per_call\": %.9e, "
      "\"best_seconds_per_call\": %.9e, \"ns_per_lane\": %.6f, \"best_ns_per_lane\": %.6f,\n",
      T, B, done, samples.size(), median, best, median / B * 1e9, best / B * 1e9);
  std::printf(" \"values\": [");
  for (int b = 0; b < B; ++b) std::printf("%s%.17g", b ? ", " : "", values[b]);
  std::printf("],\n \"grads\": [");
  for (int b = 0; b < B; ++b) std::printf("%s[%.17g, %.17g]", b ? ", " : "", grads[2 * b], grads[2 * b + 1]);
  std::printf("]}\n");
  return 0;
}
