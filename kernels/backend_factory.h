// CreateBackend: the one place that knows which backends this build has. The CPU backend
// is always built; others are added under their build flag.
#ifndef COIL_KERNELS_BACKEND_FACTORY_H_
#define COIL_KERNELS_BACKEND_FACTORY_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/backend.h"
#include "kernels/backend_options.h"

namespace coil {

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(BackendKind kind,
                                                       const BackendOptions& options = {});

// "cpu" or "cuda" (what a --device flag takes), whether or not this build has the backend:
// CreateBackend says what is missing.
absl::StatusOr<BackendKind> ParseBackendKind(absl::string_view text);

}  // namespace coil

#endif  // COIL_KERNELS_BACKEND_FACTORY_H_
