// The device half of the NCCL all-reduce with more than 2 ranks: after an all-gather,
// every rank adds the size() copies of each element in rank order, so all ranks hold the
// same bits and an element's value does not depend on the element count.
#ifndef COIL_WORKERS_COMM_RANK_ORDER_SUM_H_
#define COIL_WORKERS_COMM_RANK_ORDER_SUM_H_

#include <cuda_runtime_api.h>

#include <cstddef>

#include "absl/status/status.h"

namespace coil::comm {

// out[i] = ((gathered[i] + gathered[count + i]) + gathered[2 count + i]) + ..., over
// `ranks` copies; enqueued on `stream`. `out` must not overlap `gathered`.
absl::Status LaunchRankOrderSum(const float* gathered, int ranks, size_t count, float* out,
                                cudaStream_t stream);

}  // namespace coil::comm

#endif  // COIL_WORKERS_COMM_RANK_ORDER_SUM_H_
