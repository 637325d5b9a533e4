// The built-in catalog entries (catalog/algorithms.cc); the catalog adds them
// on first use.
#ifndef GRADEX_CATALOG_BUILTIN_H_
#define GRADEX_CATALOG_BUILTIN_H_

#include <vector>

#include "catalog/catalog.h"

namespace gradex::catalog {

std::vector<AlgorithmSpec> BuiltinAlgorithms();

}  // namespace gradex::catalog

#endif  // GRADEX_CATALOG_BUILTIN_H_
