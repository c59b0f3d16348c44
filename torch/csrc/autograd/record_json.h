#pragma once

// The per-process record's JSON (Note [The per-process record],
// process_record.h), from a snapshot (Note [One snapshot, several
// encodings], process_snapshot.h).

#include <torch/csrc/autograd/process_snapshot.h>

#include <string>

namespace torch::autograd::device_logging::detail {

// The record's schema version (Note [One schema for the record],
// record_json.cpp).
extern const char* const kRecordSchema;

// The record as one line of JSON with a trailing newline, in the format of
// schema/process_record.schema.json. Strings are arbitrary bytes; invalid
// UTF-8 is replaced. Throws std::bad_alloc only.
std::string encode_record_json(const ProcessSnapshot& snapshot);

// "YYYY-MM-DDTHH:MM:SSZ" for nanoseconds since the epoch.
std::string utc_text(int64_t ns);

// The same bytes made valid UTF-8 (each invalid sequence replaced by
// U+FFFD), as the record's JSON gives them.
std::string valid_utf8(const std::string& text);

} // namespace torch::autograd::device_logging::detail
