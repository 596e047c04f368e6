// The tokenizer a written model directory carries, cut to the model's vocabulary: a small
// shape (tiny: 250 ids) beside the 50,277-id GPT-NeoX tokenizer would get prompt ids it has
// no embedding for, and ModelInfo and Detokenize would disagree about the vocabulary. The
// cut keeps the ids below the model's vocabulary size, the merges whose pieces and result
// are kept, and the added tokens below it; it refuses when a byte that UTF-8 text can
// contain would have no token, since text prompts could then fail to encode.
#ifndef COIL_TOOLS_MAKE_MODEL_TOKENIZER_CUT_H_
#define COIL_TOOLS_MAKE_MODEL_TOKENIZER_CUT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace coil::model {

// Writes `source` (a byte-level BPE tokenizer.json) to `destination`, unchanged when every
// id is below `vocab_size`, else cut to those ids.
absl::Status WriteTokenizerForVocab(const std::string& source, int64_t vocab_size,
                                    const std::string& destination);

}  // namespace coil::model

#endif  // COIL_TOOLS_MAKE_MODEL_TOKENIZER_CUT_H_
