// The one place where coil's absl::Status codes become gRPC status codes (docs/ARCHITECTURE.md §3).
// The numeric values of the two code sets are the same by design; this keeps the mapping explicit
// and keeps the message, which already says what to fix.
#ifndef COIL_ENGINE_STATUS_TO_GRPC_H_
#define COIL_ENGINE_STATUS_TO_GRPC_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace coil {

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace coil

#endif  // COIL_ENGINE_STATUS_TO_GRPC_H_
