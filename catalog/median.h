// The medians of the services' recent timings (the coordinator's CCR profiler
// and bucket controller, the agent's link probe, the client's statistics).
// In catalog/ (header only): the one folder the coordinator, agent and client all reach.
#ifndef GRADEX_CATALOG_MEDIAN_H_
#define GRADEX_CATALOG_MEDIAN_H_

#include <algorithm>
#include <iterator>
#include <vector>

namespace gradex::catalog {

// The middle value; for an even count the mean of the two middle values. 0 for none.
template <typename Values>
double Median(const Values& values) {
  std::vector<double> v(std::begin(values), std::end(values));
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The upper of the two middle values for an even count (a value that was
// measured, never a mean of two). 0 for none. The client's statistics report it.
template <typename Values>
double UpperMedian(const Values& values) {
  std::vector<double> v(std::begin(values), std::end(values));
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace gradex::catalog

#endif  // GRADEX_CATALOG_MEDIAN_H_
