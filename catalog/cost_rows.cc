#include "catalog/cost_rows.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "catalog/models.h"

namespace gradex::catalog {
namespace {

constexpr double e = 8, w = 4;  // bytes per COO entry, per dense element

CostRange Exact(double latency, double bytes, std::string formula) {
  return {latency, latency, bytes, bytes, std::move(formula)};
}

// The shapes every row reads: P, n, k = density n, log2 terms, and the fold
// of a non-power-of-two P onto P' = 2^floor(log2 P).
struct Shape {
  double P, N, k;
  int L, Lf;
  double Pf, fold;
  explicit Shape(const CostInputs& in)
      : P(in.world),
        N(static_cast<double>(in.elements)),
        k(in.density * N),
        L(CeilLog2(in.world)),
        Lf(FloorLog2(in.world)),
        Pf(std::ldexp(1.0, Lf)),
        fold((1 << Lf) == in.world ? 0 : 1) {}
};

}  // namespace

CostRange DenseRingRow(const CostInputs& in) {
  const Shape s(in);
  return Exact(2 * (s.P - 1), 2 * (s.P - 1) / s.P * w * s.N, "2(P-1)α + 2n(P-1)/P β");
}

CostRange DenseRabenseifnerRow(const CostInputs& in) {
  // Table 1's row holds for powers of two; the fold sends the whole vector
  // to a partner and back, on the critical path.
  const Shape s(in);
  const double bytes = 2 * (s.Pf - 1) / s.Pf * w * s.N + 2 * s.fold * w * s.N;
  return CostRange{2.0 * s.Lf + 2 * s.fold, 2.0 * s.Lf + 2 * s.fold, bytes, bytes,
                   "2 log2(P')α + 2n(P'-1)/P' β, P' = 2^floor(log2 P); fold: +2α + 2nβ"};
}

CostRange AllGatherTopkRow(const CostInputs& in) {
  const Shape s(in);
  return Exact(s.L, (s.P - 1) * e * s.k, "log2(P)α + 2k(P-1)β");
}

CostRange GaussianThresholdRow(const CostInputs& in) {
  // The Gaussian threshold selects at least 3k/4; the table counts k.
  const Shape s(in);
  return CostRange{double(s.L), double(s.L), 0.75 * (s.P - 1) * e * s.k, 2 * (s.P - 1) * e * s.k,
                   "log2(P)α + 2k'(P-1)β, k' in [3k/4, 2k]"};
}

CostRange DynamicSparseSplitRow(const CostInputs& in) {
  const Shape s(in);
  return CostRange{s.P - 1 + s.L, s.P + 2.0 * s.L, 2 * e * s.k * (s.P - 1) / s.P,
                   (e * s.k + w * s.N) * (s.P - 1) / s.P,
                   "(P + 2 log2 P)α + [4k(P-1)/P, (2k+n)(P-1)/P] β"};
}

CostRange GlobalTopkTreeRow(const CostInputs& in) {
  // Table 1's row is for powers of two; the fold adds one message of k
  // entries (in) or two (in and out) to the critical path.
  const Shape s(in);
  return CostRange{2.0 * s.Lf + s.fold, 2.0 * s.Lf + 2 * s.fold, (2.0 * s.Lf + s.fold) * e * s.k,
                   (2.0 * s.Lf + 2 * s.fold) * e * s.k,
                   "2 log2(P)α + 4k log2(P) β (P' = 2^floor(log2 P), fold +1..2 messages)"};
}

CostRange OkTopkRow(const CostInputs& in) {
  // Split-and-reduce to P-1 peers, then all-gatherv; the boundary and
  // threshold agreements add small allreduces (2 log2 P more at most).
  const Shape s(in);
  return CostRange{s.P - 1, 2 * s.P + 4.0 * s.L, e * s.k * (s.P - 1) / s.P,
                   3 * e * s.k * (s.P - 1) / s.P, "(2P + 2 log2 P)α + [2k(P-1)/P, 6k(P-1)/P] β"};
}

CostRange SsarRecursiveDoublingRow(const CostInputs& in) {
  // Recursive doubling over P': the stream at step i holds the top-k sets of
  // a cube of 2^i ranks plus those folded onto it (at most min(2^i, P-P')),
  // at most N entries. SSAR's streams are static (SparCML: the δ switch is
  // the stream type's, DSAR's; "SSAR" assumes a sparse result), so a
  // filled-in stream stays COO, 8 bytes an element, not capped at the dense
  // 4N. A fold adds k entries in and the result out.
  const Shape s(in);
  const double rest = s.P - s.Pf;
  double hi = s.fold * e * std::min(s.k, s.N) + s.fold * e * std::min(s.P * s.k, s.N);
  for (int i = 0; i < s.Lf; ++i) {
    const double sets = std::ldexp(1.0, i) + std::min(std::ldexp(1.0, i), rest);
    hi += e * std::min(sets * s.k, s.N);
  }
  return CostRange{s.Lf + 2 * s.fold, s.Lf + 2 * s.fold, (s.Lf + 2 * s.fold) * e * s.k, hi,
                   "log2(P)α + [2k log2 P, 2k(P-1)] β (static: up to 2N a step, no dense "
                   "switch)"};
}

namespace {
CostRange SplitLatency(const Shape& s) {
  const double lat_a = s.P - 1 + s.L, lat_b = 2 * (s.P - 1);
  return CostRange{std::min(lat_a, lat_b), std::max(lat_a, lat_b), 0, 0, ""};
}
}  // namespace

CostRange SsarSplitRow(const CostInputs& in) {
  // Static streams: a filled-in slice stays COO (8 bytes an element), so
  // the gather's cap is 2n/P words a slice, not the dense n/P.
  const Shape s(in);
  const double split = e * s.k * (s.P - 1) / s.P;
  CostRange c = SplitLatency(s);
  c.bytes_lo = 2 * split;
  c.bytes_hi = split + (s.P - 1) * e * std::min(s.k, s.N / s.P);
  c.formula = "(P-1 + log2 P)α + [4k(P-1)/P, 2k(P-1)/P + (P-1) min(2k, 2n/P)] β";
  return c;
}

CostRange DsarSplitRow(const CostInputs& in) {
  const Shape s(in);
  const double split = e * s.k * (s.P - 1) / s.P;
  CostRange c = SplitLatency(s);
  c.bytes_lo = c.bytes_hi = split + w * s.N * (s.P - 1) / s.P;
  c.formula = "(P-1 + log2 P)α + [2k(P-1)/P + n(P-1)/P] β";
  return c;
}

CostRange SparDLRow(const CostInputs& in) {
  const Shape s(in);
  return Exact(2.0 * s.L, 2 * (s.P - 1) / s.P * e * s.k, "2 log2(P)α + 4k(P-1)/P β");
}

namespace {
// The SAG rows share the reduce-scatter inside each team of Q = P/T.
struct Sag {
  double T, Q, srs, latency;
  int Lt;
  Sag(const CostInputs& in, const Shape& s)
      : T(in.teams),
        Q(static_cast<double>(in.world) / in.teams),
        srs(2 * (Q - 1) / Q * e * s.k),
        latency(2.0 * CeilLog2(in.world / in.teams) + CeilLog2(in.teams)),
        Lt(CeilLog2(in.teams)) {}
};
}  // namespace

CostRange RsagRow(const CostInputs& in) {
  const Shape s(in);
  const Sag g(in, s);
  return Exact(g.latency, g.srs + g.Lt * e * s.k / g.Q,
               "2 log2(Q)α + log2(T)α + [4k(Q-1)/Q + 2k log2(T)/Q] β, Q = P/T");
}

CostRange BsagRow(const CostInputs& in) {
  // k' (per block) lies in [k_block/T, k_block]; the controller starts low.
  const Shape s(in);
  const Sag g(in, s);
  auto bytes = [&](double r) { return g.srs + (g.T - 1) * e * r * s.k / g.Q; };
  const char* formula = "2 log2(Q)α + log2(T)α + [4k(Q-1)/Q + 2(T-1)k'] β, k' in [k/(QT), k/Q]";
  if (in.kprime_ratio > 0) {
    return Exact(g.latency, bytes(std::clamp(in.kprime_ratio, 1 / g.T, 1.0)), formula);
  }
  return CostRange{g.latency, g.latency, bytes(1 / g.T), bytes(1.0), formula};
}

CostRange CovapRow(const CostInputs& in) {
  // A call sends nothing or one part of its bucket; the most is the whole
  // bucket by a dense ring. Over any I consecutive steps every part is sent
  // once, so a call costs 1/I of the ring on average: the row's low end.
  const Shape s(in);
  const double interval = in.covap_interval > 0 ? in.covap_interval : 3;
  const double latency = 2 * (s.P - 1), bytes = 2 * (s.P - 1) / s.P * w * s.N;
  return CostRange{latency / interval, latency, bytes / interval, bytes,
                   "per call 0 or a part of the bucket, at most 2(P-1)α + 2n(P-1)/P β (the whole "
                   "bucket); the mean over I steps (I = covap_interval) is 1/I of it"};
}

}  // namespace gradex::catalog
