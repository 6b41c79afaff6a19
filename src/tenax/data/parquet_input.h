// Parquet inputs of `tenax prepare` (a file named *.parquet), as the Hugging Face datasets hub
// distributes corpora: one document per row, its text in one column (--text-column, default
// "text"), read row group by row group so memory stays bounded by a row group.
//
// The reader is Apache Arrow's C++ library (libparquet, libarrow): the reference implementation,
// the one Hugging Face datasets itself reads Parquet with (through pyarrow), and the only
// maintained C++ reader this machine can install (Debian 12 packages none; pyarrow's wheel
// carries the libraries with their headers, pinned in scripts/python-test-requirements.txt). It
// runs in a helper program, tenax-parquet (apps/parquet/tenax_parquet.cc), so that tenax itself
// neither needs the wheel to start nor loads Arrow beside anything else; CMake builds the helper
// when it finds pyarrow (cmake/TenaxParquet.cmake).
//
// The protocol between the two (this header is its one description):
//   tenax-parquet inspect FILE COLUMN
//       stdout: one JSON line {"rows": N, "row_groups": [{"rows": R, "bytes": B}, ...],
//       "type": "string"}: the row count, each row group's rows and compressed bytes, the
//       column's Arrow type (string, large_string or string_view).
//   tenax-parquet read FILE COLUMN GROUP
//       stdout: every value of COLUMN in row group GROUP, in row order, each as a uint64
//       little-endian byte length and the UTF-8 bytes; a null is the length 2^64 - 1 alone.
//   Exit 0: done. 2: usage. 3: FILE is not a readable Parquet file (truncated, not Parquet),
//   COLUMN is missing (the file's columns are listed) or not text, or a page cannot be decoded;
//   stderr holds the reason on one line.
// Non-goals: nested columns (a field inside a struct), binary columns, predicate pushdown,
// reading from object stores (download the files first).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tenax/core/status.h"

namespace tenax::data {

struct ParquetInfo {
  int64_t rows = 0;
  std::vector<int64_t> group_rows;   // per row group
  std::vector<int64_t> group_bytes;  // per row group, compressed, as stored in the file
  std::string type;                  // the column's Arrow type
};

// The helper's path ($TENAX_PARQUET, beside this program, or in PATH), or NotFound saying how to
// build it.
Result<std::string> FindParquetHelper();

// Checks that `path` is a readable Parquet file with text column `column`. Errors name the file
// and the column.
Result<ParquetInfo> InspectParquet(const std::string& path, const std::string& column);

// The values of `column` in row group `group`; nulls are left out and counted in *nulls.
Result<std::vector<std::string>> ReadParquetRowGroup(const std::string& path,
                                                     const std::string& column, int group,
                                                     int64_t* nulls);

}  // namespace tenax::data
