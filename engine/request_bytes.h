// Turns the bytes of a call into its request message, with a clear INVALID_ARGUMENT when
// they are not one: gRPC's own deserialization answers a malformed message with
// UNIMPLEMENTED and an empty message, and protobuf logs a line for every string that is not
// UTF-8, which lets any client flood the log. Here the strings are checked first (so
// protobuf never logs), field by field, and the error names the field to fix.
#ifndef COIL_ENGINE_REQUEST_BYTES_H_
#define COIL_ENGINE_REQUEST_BYTES_H_

#include <google/protobuf/message.h>
#include <grpcpp/support/byte_buffer.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace coil {

// Parses `bytes` into `message` (cleared first). INVALID_ARGUMENT when the bytes are not
// protobuf wire format, when a string field (at any depth) is not valid UTF-8 (naming it,
// e.g. "sampling.stop"), or when they do not decode as `message`'s type.
absl::Status ParseRequestBytes(absl::string_view bytes, google::protobuf::Message& message);

// The same from a call's ByteBuffer.
absl::Status ParseRequestBuffer(const grpc::ByteBuffer& buffer, google::protobuf::Message& message);

// Logs a refused malformed request, at most once every 10 s (with how many were not logged).
void LogMalformedRequest(absl::string_view method, const absl::Status& status);

// Routes protobuf's own log lines through coil's logger, at most one every 10 s, so that
// no client can flood the log through them. Call once at start-up.
void RouteProtobufLogs();

}  // namespace coil

#endif  // COIL_ENGINE_REQUEST_BYTES_H_
