// libFuzzer target: the torch.save reader on arbitrary bytes, both whole (zip, then the
// pickle inside) and the unpickler alone, so the fuzzer reaches the pickle opcodes without
// having to forge a zip archive with a valid CRC. Accepted tensors are read in full.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/touch.h"
#include "workers/model/pytorch_zip.h"
#include "workers/model/torch_pickle.h"
#include "workers/model/zip_archive.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<std::vector<coil::model::StoredTensor>> tensors =
      coil::model::ParsePytorchZip({data, size}, "fuzz.bin");
  if (tensors.ok()) {
    for (const coil::model::StoredTensor& tensor : *tensors) {
      coil::fuzz::Touch(tensor.bytes);
    }
  }
  absl::StatusOr<std::vector<coil::model::ZipEntry>> entries =
      coil::model::ReadZipArchive({data, size}, "fuzz.zip");
  if (entries.ok()) {
    for (const coil::model::ZipEntry& entry : *entries) {
      coil::fuzz::Touch(entry.data);
    }
  }
  (void)coil::model::ParseTorchStateDict({data, size});
  return 0;
}
