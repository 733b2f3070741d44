#include "importer/npy.h"

#include <cstring>

#include "importer/input_file.h"
#include "importer/output_file.h"
#include "importer/tensor_proto.h"
#include "ir/error.h"

namespace fusec {

namespace fs = std::filesystem;

namespace {

const char* descr_of(DType t) {
  switch (t) {
    case DType::Float32:
      return "<f4";
    case DType::Float64:
      return "<f8";
    case DType::Float16:
      return "<f2";
    case DType::Int8:
      return "|i1";
    case DType::UInt8:
      return "|u1";
    case DType::Int16:
      return "<i2";
    case DType::Int32:
      return "<i4";
    case DType::Int64:
      return "<i8";
    case DType::Bool:
      return "|b1";
    default:
      return nullptr;
  }
}

DType dtype_of_descr(const std::string& d, const std::string& file) {
  for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::Int8, DType::UInt8, DType::Int16, DType::Int32,
                  DType::Int64, DType::Bool}) {
    const std::string want = descr_of(t);
    // '<' (little-endian) also reads as '|' (no byte order) and '=' (native) as '<'.
    const bool same_type = d.size() == want.size() && d.compare(1, std::string::npos, want, 1) == 0;
    if (d == want || (same_type && ((want[0] == '|' && d[0] == '<') || (want[0] == '<' && d[0] == '=')))) return t;
  }
  bad_input("'" + file + "': numpy dtype '" + d + "' is not supported (big-endian or non-numeric?)");
}

// Finds `'key': value` in the header dict and returns the raw value text.
std::string header_field(const std::string& h, const std::string& key, const std::string& file) {
  const auto k = h.find("'" + key + "'");
  if (k == std::string::npos) bad_input("'" + file + "': .npy header lacks '" + key + "'");
  const auto colon = h.find(':', k);
  const size_t start = colon == std::string::npos ? colon : h.find_first_not_of(' ', colon + 1);
  size_t end = std::string::npos;
  if (start != std::string::npos) {
    if (h[start] == '(') {
      end = h.find(')', start);
      if (end != std::string::npos) ++end;
    } else {
      end = h.find_first_of(",}", start);
    }
  }
  if (end == std::string::npos) bad_input("'" + file + "': .npy header has no value for '" + key + "'");
  return h.substr(start, end - start);
}

/// numpy writes headers of a few hundred bytes; its own reader refuses more than 10,000.
constexpr size_t kMaxHeader = size_t{1} << 20;

}  // namespace

Tensor read_npy(const fs::path& path) {
  const std::string file = path.string();
  InputFile in(path, {"an input tensor file"});
  unsigned char pre[12];
  if (in.read_next(pre, 10) < 10 || std::memcmp(pre, "\x93NUMPY", 6) != 0)
    bad_input("'" + file + "' is not a .npy file");
  const int major = pre[6];
  size_t header_len = 0, pos = 0;
  if (major == 1) {
    header_len = pre[8] | (pre[9] << 8);
    pos = 10;
  } else if (major == 2 || major == 3) {
    if (in.read_next(pre + 10, 2) < 2) bad_input("'" + file + "' is truncated");
    for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(pre[8 + i]) << (8 * i);
    pos = 12;
  } else {
    bad_input("'" + file + "': unsupported .npy version " + std::to_string(major));
  }
  if (header_len > kMaxHeader) bad_input("'" + file + "': a .npy header of " + std::to_string(header_len) + " bytes");
  std::string h(header_len, '\0');
  if (in.read_next(h.data(), header_len) < header_len) bad_input("'" + file + "': truncated .npy header");
  std::string descr = header_field(h, "descr", file);
  if (descr.size() < 2) bad_input("'" + file + "': bad descr");
  descr = descr.substr(1, descr.size() - 2);
  if (header_field(h, "fortran_order", file).rfind("False", 0) != 0)
    bad_input("'" + file + "': Fortran-order arrays are not supported; save with np.ascontiguousarray");
  std::string shape = header_field(h, "shape", file);
  std::vector<int64_t> dims;
  std::string num;
  for (char c : shape + ")") {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      num += c;
      if (num.size() > 18) bad_input("'" + file + "': dimension too large");
    } else if (!num.empty()) {
      dims.push_back(std::stoll(num));
      num.clear();
    }
  }
  const DType t = dtype_of_descr(descr, file);
  int64_t n = 0;
  try {
    n = checked_numel(dims);
  } catch (const Error& e) {
    bad_input("'" + file + "': shape " + dims_str(dims) + ": " + e.what());
  }
  if (n > static_cast<int64_t>((uint64_t{1} << 62) / dtype_size(t)))
    bad_input("'" + file + "': shape " + dims_str(dims) + " is too large");
  const uint64_t needed = static_cast<uint64_t>(n) * dtype_size(t);
  const uint64_t data_pos = pos + header_len;
  // The declared size against the bytes the file holds, before anything is allocated.
  if (in.sized() && in.size() - std::min<uint64_t>(in.size(), data_pos) != needed)
    bad_input("'" + file + "': holds " + std::to_string(in.size() - std::min<uint64_t>(in.size(), data_pos)) +
              " data bytes, shape " + dims_str(dims) + " needs " + std::to_string(needed));
  Tensor out(t, dims);  // counted against --max-memory
  if (in.sized()) {
    in.read_at(out.raw(), out.nbytes(), data_pos);
  } else {  // a stream: its length shows only as it is read
    if (const size_t got = in.read_next(out.raw(), out.nbytes()); got != out.nbytes())
      bad_input("'" + file + "': holds " + std::to_string(got) + " data bytes, shape " + dims_str(dims) + " needs " +
                std::to_string(needed));
    in.expect_end("the " + std::to_string(needed) + " data bytes shape " + dims_str(dims) + " needs");
  }
  return out;
}

void write_npy(const Tensor& t, const fs::path& path, const OutputOptions& opts) {
  const char* descr = descr_of(t.dtype());
  if (!descr) bad_input(std::string("cannot write ") + dtype_name(t.dtype()) + " to .npy; use --format pb");
  std::string shape = "(";
  for (size_t i = 0; i < t.rank(); ++i)
    shape += std::to_string(t.dim(i)) + (t.rank() == 1 || i + 1 < t.rank() ? ", " : "");
  if (t.rank() > 1) shape.resize(shape.size());
  shape += ")";
  std::string h = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + h.size() + 1;
  h.append((64 - total % 64) % 64, ' ');
  h += '\n';
  OutputFile out(path, opts);
  out.write("\x93NUMPY\x01\x00", 8);
  char len[2] = {static_cast<char>(h.size() & 0xff), static_cast<char>(h.size() >> 8)};
  out.write(len, 2);
  out.write(h.data(), h.size());
  out.write(t.raw(), t.nbytes());
  out.commit();
}

Tensor read_tensor_file(const fs::path& file) {
  if (file.extension() == ".npy") return read_npy(file);
  return read_tensor_pb(file);
}

}  // namespace fusec
