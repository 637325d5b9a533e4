// What an exchanged bucket's result becomes before the trainer sees it, on
// either path (the host's FinishCall in bucket_pipeline.cc, the device's
// FinishOnDevice and FinishStaged in bucket_pipeline_device.cc): the mean's
// division and the entries factor masking restarts. Written once so the
// paths cannot drift apart.
#ifndef GRADEX_PIPELINE_BUCKET_RESULT_H_
#define GRADEX_PIPELINE_BUCKET_RESULT_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace gradex::pipeline {

// Divides each value by the world for the mean (a division, as DDP's
// average: the results stay bitwise those of the sum divided), or leaves
// them (mean off: the sum).
void ScaleForMean(std::span<float> values, bool mean, float world);

// The indices of the nonzero values: the entries the result applied.
std::vector<uint32_t> AppliedIndices(std::span<const float> values);

// How many values are nonzero: the entries the result applied.
size_t CountApplied(std::span<const float> values);

// Keeps, in order, the indices whose value is nonzero (a sparse result's
// applied entries after the mean's division).
void KeepApplied(std::vector<uint32_t>* idx, std::span<const float> val);

// DGC's factor masking, where it is on (BucketPipeline::FactorMaskingOn),
// restarts a sent entry's velocity from 0 after a sparse result: fewer than
// half of the bucket's n entries applied. Dense steps (start_iter, probes,
// fallbacks) keep their momentum.
inline bool SparseResult(size_t applied, size_t n) { return 2 * applied < n; }

}  // namespace gradex::pipeline

#endif  // GRADEX_PIPELINE_BUCKET_RESULT_H_
