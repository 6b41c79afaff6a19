// tenax-parquet: the Parquet half of `tenax prepare`, in its own process. It links Apache Arrow's
// C++ library (libarrow, libparquet) from pyarrow's wheel, which scripts/setup installs into
// .deps/venv for the tests; keeping it out of tenax means tenax starts without that wheel and
// never loads Arrow's allocators and bundled libraries beside anything else. The protocol, and the
// client that speaks it, are in src/tenax/data/parquet_input.h.
//
//   tenax-parquet inspect FILE COLUMN        one JSON line (parquet_input.h: ParquetInfo)
//   tenax-parquet read FILE COLUMN GROUP     the column's values in row group GROUP, framed
// Exit codes: 0 ok, 2 usage, 3 FILE is not a readable Parquet file or COLUMN is not a text
// column of it (the reason on stderr, one line).
#include <arrow/api.h>
#include <arrow/io/file.h>
#include <parquet/arrow/reader.h>
#include <parquet/exception.h>
#include <parquet/file_reader.h>
#include <parquet/metadata.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace {

// The reason on stderr, exit 3.
[[noreturn]] void Fail(const std::string& why) {
  std::fprintf(stderr, "%s\n", why.c_str());
  std::exit(3);
}

template <typename T>
T Check(arrow::Result<T> r, const std::string& what) {
  if (!r.ok()) Fail(what + ": " + r.status().ToString());
  return std::move(r).ValueOrDie();
}

void Check(const arrow::Status& st, const std::string& what) {
  if (!st.ok()) Fail(what + ": " + st.ToString());
}

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

struct Opened {
  std::unique_ptr<parquet::arrow::FileReader> reader;
  int field = -1;  // the column's index among the schema's fields
  std::string type;
};

bool IsText(const arrow::DataType& t) {
  return t.id() == arrow::Type::STRING || t.id() == arrow::Type::LARGE_STRING ||
         t.id() == arrow::Type::STRING_VIEW;
}

Opened Open(const std::string& path, const std::string& column) {
  Opened o;
  std::shared_ptr<arrow::io::ReadableFile> file =
      Check(arrow::io::ReadableFile::Open(path), "cannot open");
  // Pages that carry a CRC (writers may add one) are verified: a damaged page is an error, not
  // garbage text. Columns decode on Arrow's thread pool.
  parquet::ReaderProperties props = parquet::default_reader_properties();
  props.set_page_checksum_verification(true);
  parquet::ArrowReaderProperties arrow_props;
  arrow_props.set_use_threads(true);
  try {
    parquet::arrow::FileReaderBuilder builder;
    Check(builder.Open(file, props), "not a readable Parquet file");
    Check(builder.memory_pool(arrow::default_memory_pool())
              ->properties(arrow_props)
              ->Build(&o.reader),
          "not a readable Parquet file");
  } catch (const parquet::ParquetException& e) {  // some paths throw instead of returning
    Fail(std::string("not a readable Parquet file: ") + e.what());
  }
  std::shared_ptr<arrow::Schema> schema;
  Check(o.reader->GetSchema(&schema), "cannot read its schema");
  o.field = schema->GetFieldIndex(column);
  if (o.field < 0) {
    std::string names;
    for (const auto& f : schema->fields()) names += (names.empty() ? "" : ", ") + f->name();
    Fail("has no column \"" + column + "\" (its columns: " + names +
         "); name the text column with --text-column");
  }
  const auto& type = *schema->field(o.field)->type();
  o.type = type.ToString();
  if (!IsText(type)) {
    Fail("column \"" + column + "\" holds " + o.type +
         ", not text (string, large_string or string_view); name the text column with "
         "--text-column");
  }
  return o;
}

// {"rows": N, "row_groups": [{"rows": R, "bytes": B}, ...], "type": "string"}; B: the group's
// compressed size in the file, for progress.
int Inspect(const std::string& path, const std::string& column) {
  Opened o = Open(path, column);
  std::shared_ptr<parquet::FileMetaData> meta = o.reader->parquet_reader()->metadata();
  std::string groups;
  for (int g = 0; g < meta->num_row_groups(); ++g) {
    std::unique_ptr<parquet::RowGroupMetaData> rg = meta->RowGroup(g);
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%s{\"rows\":%lld,\"bytes\":%lld}", g ? "," : "",
                  static_cast<long long>(rg->num_rows()),
                  static_cast<long long>(rg->total_compressed_size()));
    groups += buf;
  }
  std::printf("{\"rows\":%lld,\"row_groups\":[%s],\"type\":%s}\n",
              static_cast<long long>(meta->num_rows()), groups.c_str(), JsonString(o.type).c_str());
  return 0;
}

void PutU64(uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
  std::fwrite(b, 1, 8, stdout);
}

template <typename Array>
void Emit(const arrow::Array& chunk) {
  const auto& a = static_cast<const Array&>(chunk);
  for (int64_t i = 0; i < a.length(); ++i) {
    if (a.IsNull(i)) {
      PutU64(UINT64_MAX);  // a null: no document
      continue;
    }
    const std::string_view v = a.GetView(i);
    PutU64(v.size());
    std::fwrite(v.data(), 1, v.size(), stdout);
  }
}

// Every value of the column in row group `group`, in row order: uint64 LE length then the UTF-8
// bytes, or a length of 2^64 - 1 for a null.
int Read(const std::string& path, const std::string& column, int group) {
  Opened o = Open(path, column);
  if (group < 0 || group >= o.reader->num_row_groups()) {
    Fail("has no row group " + std::to_string(group));
  }
  std::shared_ptr<arrow::ChunkedArray> values;
  try {
    std::shared_ptr<parquet::arrow::ColumnChunkReader> chunk =
        o.reader->RowGroup(group)->Column(o.field);
    Check(chunk->Read(&values),
          "cannot read column \"" + column + "\" of row group " + std::to_string(group));
  } catch (const parquet::ParquetException& e) {
    Fail("cannot read column \"" + column + "\" of row group " + std::to_string(group) + ": " +
         e.what());
  }
  for (const std::shared_ptr<arrow::Array>& c : values->chunks()) {
    switch (c->type_id()) {
      case arrow::Type::STRING:
        Emit<arrow::StringArray>(*c);
        break;
      case arrow::Type::LARGE_STRING:
        Emit<arrow::LargeStringArray>(*c);
        break;
      case arrow::Type::STRING_VIEW:
        Emit<arrow::StringViewArray>(*c);
        break;
      default:
        Fail("column \"" + column + "\" read back as " + c->type()->ToString());
    }
  }
  if (std::fflush(stdout) != 0) return 3;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "inspect" && argc == 4) return Inspect(argv[2], argv[3]);
  if (cmd == "read" && argc == 5) return Read(argv[2], argv[3], std::atoi(argv[4]));
  std::fprintf(stderr, "usage: tenax-parquet inspect FILE COLUMN | read FILE COLUMN GROUP\n");
  return 2;
}
