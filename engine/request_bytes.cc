#include "engine/request_bytes.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/unknown_field_set.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "engine/tokenizer/unicode.h"

namespace coil {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::UnknownField;
using google::protobuf::UnknownFieldSet;

// Nesting deeper than any coil message; protobuf's own parser stops at 100.
constexpr int kMaxDepth = 32;

absl::Status NotWireFormat(const Descriptor& type, const std::string& path) {
  return absl::InvalidArgumentError(absl::StrCat(
      "the request is not a valid ", type.full_name(),
      path.empty() ? std::string() : absl::StrCat(" (at field ", path, ")"),
      ": its bytes are not protobuf wire format; send a message encoded from "
      "proto/coil/v1/generation.proto"));
}

// Every string field of `fields` (a message of type `type`) at any depth must be UTF-8.
absl::Status CheckStrings(const UnknownFieldSet& fields, const Descriptor& type,
                          const std::string& path, int depth) {
  for (int i = 0; i < fields.field_count(); ++i) {
    const UnknownField& field = fields.field(i);
    const FieldDescriptor* descriptor = type.FindFieldByNumber(field.number());
    // Unknown fields are kept by protobuf unchecked; a known field on the wrong wire type
    // is treated as unknown too.
    if (descriptor == nullptr || field.type() != UnknownField::TYPE_LENGTH_DELIMITED) continue;
    const std::string name =
        path.empty() ? descriptor->name() : absl::StrCat(path, ".", descriptor->name());
    if (descriptor->type() == FieldDescriptor::TYPE_STRING) {
      if (!tokenizer::CheckUtf8(field.length_delimited()).ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "field ", name, " is not valid UTF-8; string fields must be UTF-8 text (send raw "
            "tokens as token ids)"));
      }
    } else if (descriptor->type() == FieldDescriptor::TYPE_MESSAGE) {
      if (depth >= kMaxDepth) {
        return absl::InvalidArgumentError(
            absl::StrCat("the request nests deeper than ", kMaxDepth, " messages at ", name));
      }
      UnknownFieldSet nested;
      if (!nested.ParseFromString(field.length_delimited())) {
        return NotWireFormat(*descriptor->message_type(), name);
      }
      const absl::Status status = CheckStrings(nested, *descriptor->message_type(), name, depth + 1);
      if (!status.ok()) return status;
    }
  }
  return absl::OkStatus();
}

LogRateLimiter& MalformedLogLimiter() {
  static LogRateLimiter limiter(std::chrono::seconds(10));
  return limiter;
}

LogRateLimiter& ProtobufLogLimiter() {
  static LogRateLimiter limiter(std::chrono::seconds(10));
  return limiter;
}

void ProtobufLogHandler(google::protobuf::LogLevel level, const char* filename, int line,
                        const std::string& message) {
  int64_t suppressed = 0;
  // A fatal message is protobuf's own bug; it aborts after the handler returns.
  if (level != google::protobuf::LOGLEVEL_FATAL && !ProtobufLogLimiter().Allow(&suppressed)) {
    return;
  }
  const std::string tail =
      suppressed > 0 ? absl::StrCat(" (", suppressed, " more protobuf messages not logged)") : "";
  switch (level) {
    case google::protobuf::LOGLEVEL_INFO:
      COIL_LOG(INFO) << "protobuf " << filename << ":" << line << ": " << message << tail;
      break;
    case google::protobuf::LOGLEVEL_WARNING:
      COIL_LOG(WARNING) << "protobuf " << filename << ":" << line << ": " << message << tail;
      break;
    default:
      COIL_LOG(ERROR) << "protobuf " << filename << ":" << line << ": " << message << tail;
      break;
  }
}

}  // namespace

absl::Status ParseRequestBytes(absl::string_view bytes, google::protobuf::Message& message) {
  message.Clear();
  const Descriptor& type = *message.GetDescriptor();
  UnknownFieldSet fields;
  if (!fields.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return NotWireFormat(type, "");
  }
  const absl::Status strings = CheckStrings(fields, type, "", 0);
  if (!strings.ok()) return strings;
  if (!message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the request is not a valid ", type.full_name(),
        ": its bytes do not decode as that message (a field of the wrong type or a malformed "
        "packed list); send a message encoded from proto/coil/v1/generation.proto"));
  }
  return absl::OkStatus();
}

absl::Status ParseRequestBuffer(const grpc::ByteBuffer& buffer, google::protobuf::Message& message) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) {
    return absl::InvalidArgumentError("the request's bytes could not be read");
  }
  std::string bytes;
  bytes.reserve(buffer.Length());
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return ParseRequestBytes(bytes, message);
}

void LogMalformedRequest(absl::string_view method, const absl::Status& status) {
  int64_t suppressed = 0;
  if (!MalformedLogLimiter().Allow(&suppressed)) return;
  COIL_LOG(WARNING) << "refused a malformed " << method << " request: " << status.message()
                    << (suppressed > 0 ? absl::StrCat(" (and ", suppressed,
                                                      " more since the last line like this)")
                                       : std::string());
}

void RouteProtobufLogs() { google::protobuf::SetLogHandler(&ProtobufLogHandler); }

}  // namespace coil
