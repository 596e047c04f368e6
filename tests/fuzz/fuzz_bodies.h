// What each checkpoint and config fuzz target does with one input, shared by the libFuzzer
// entry points (fuzz_*.cc, built with -DCOIL_FUZZ=ON) and the corpus replay test of the
// normal build (tests/unit/workers/checkpoint/fuzz_corpus_test.cc), so that an input saved
// in tests/fuzz/corpus/<target>/ after a finding is replayed by every ctest run. The
// tokenizer's bodies are in fuzz_tokenizer_bodies.h (they need the tokenizer library).
#ifndef COIL_TESTS_FUZZ_FUZZ_BODIES_H_
#define COIL_TESTS_FUZZ_FUZZ_BODIES_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "workers/checkpoint/checkpoint.h"
#include "workers/checkpoint/pytorch_zip.h"
#include "workers/checkpoint/safetensors.h"
#include "workers/checkpoint/torch_pickle.h"
#include "workers/checkpoint/zip_archive.h"
#include "workers/model/model_config.h"
#include "workers/model/model_files.h"

namespace coil::fuzz {

// Reads every byte of a span a parser handed out, so AddressSanitizer reports a span that
// leaves the input. The asm keeps the compiler from dropping the reads.
inline void Touch(absl::Span<const uint8_t> bytes) {
  uint8_t sum = 0;
  for (uint8_t byte : bytes) sum ^= byte;
  asm volatile("" : : "r"(sum));
}

// The safetensors parser; accepted tensors are read in full.
inline void FuzzSafetensors(const uint8_t* data, size_t size) {
  auto tensors = checkpoint::ParseSafetensors({data, size}, "fuzz.safetensors");
  if (!tensors.ok()) return;
  for (const checkpoint::StoredTensor& tensor : *tensors) Touch(tensor.bytes);
}

// The sharded checkpoint's index (model.safetensors.index.json). An accepted index names
// only shard files inside the model directory.
inline void FuzzSafetensorsIndex(const uint8_t* data, size_t size) {
  absl::string_view text(reinterpret_cast<const char*>(data), size);
  auto index = checkpoint::ParseSafetensorsIndex(text, "fuzz.index.json");
  if (!index.ok()) return;
  for (const auto& [tensor, shard] : *index) {
    if (shard.empty() || shard == "." || shard == ".." ||
        shard.find_first_of(std::string("/\0", 2)) != std::string::npos) {
      std::abort();  // a shard name that leaves the model directory was accepted
    }
  }
}

// torch.save's pickle (data.pkl) alone. An accepted state dict must come back the same
// through WriteTorchStateDict (the writer coil-make-model uses) and the parser.
inline void FuzzTorchPickle(const uint8_t* data, size_t size) {
  auto tensors = checkpoint::ParseTorchStateDict({data, size});
  if (!tensors.ok()) return;
  std::string written = checkpoint::WriteTorchStateDict(*tensors);
  auto back = checkpoint::ParseTorchStateDict(
      {reinterpret_cast<const uint8_t*>(written.data()), written.size()});
  if (!back.ok() || back->size() != tensors->size()) std::abort();
  for (size_t i = 0; i < tensors->size(); ++i) {
    const checkpoint::PickledTensor& a = (*tensors)[i];
    const checkpoint::PickledTensor& b = (*back)[i];
    if (a.name != b.name || a.storage_key != b.storage_key || a.dtype != b.dtype ||
        a.storage_numel != b.storage_numel || a.storage_offset != b.storage_offset ||
        a.shape != b.shape || a.stride != b.stride) {
      std::abort();  // the writer and the parser disagree on a tensor
    }
  }
}

// The torch.save reader whole (zip, then the pickle inside), the zip reader, and the
// unpickler alone, so the fuzzer reaches the pickle opcodes without forging a zip archive
// with a valid CRC.
inline void FuzzTorchZip(const uint8_t* data, size_t size) {
  auto tensors = checkpoint::ParsePytorchZip({data, size}, "fuzz.bin");
  if (tensors.ok()) {
    for (const checkpoint::StoredTensor& tensor : *tensors) Touch(tensor.bytes);
  }
  auto entries = checkpoint::ReadZipArchive({data, size}, "fuzz.zip");
  if (entries.ok()) {
    for (const checkpoint::ZipEntry& entry : *entries) Touch(entry.data);
  }
  (void)checkpoint::ParseTorchStateDict({data, size});
}

// config.json parsing. An accepted config must survive a round trip through
// ModelConfigToJson in both formats with the same shape (the invariant the writer and the
// parser share), and RequiredTensors must be computable.
inline void FuzzConfig(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<model::ModelConfig> config = model::ParseModelConfig(text);
  if (!config.ok()) return;
  (void)model::RequiredTensors(*config);
  // A Mamba2 config goes through both Mamba2 dialects; a hybrid through its own.
  std::vector<model::ConfigFormat> formats = {model::ConfigFormat::kMambaSsm,
                                              model::ConfigFormat::kHuggingFace};
  if (config->format == model::ConfigFormat::kNemotronH) formats = {config->format};
  for (model::ConfigFormat format : formats) {
    absl::StatusOr<model::ModelConfig> back =
        model::ParseModelConfig(model::ModelConfigToJson(*config, format));
    if (!back.ok() || back->d_model != config->d_model || back->n_layer != config->n_layer ||
        back->nheads() != config->nheads() || back->ngroups != config->ngroups ||
        back->padded_vocab_size() != config->padded_vocab_size() ||
        back->tie_embeddings != config->tie_embeddings || back->bias != config->bias ||
        back->conv_bias != config->conv_bias || back->layer_pattern != config->layer_pattern ||
        back->attention_heads != config->attention_heads || back->kv_heads != config->kv_heads ||
        back->intermediate_size != config->intermediate_size) {
      std::abort();  // the writer produced a config the parser reads differently
    }
  }
}

}  // namespace coil::fuzz

#endif  // COIL_TESTS_FUZZ_FUZZ_BODIES_H_
