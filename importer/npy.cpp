#include "importer/npy.h"

#include <fstream>

#include "importer/atomic_file.h"
#include "importer/tensor_proto.h"
#include "ir/error.h"

namespace fusec {

namespace fs = std::filesystem;

namespace {

const char* descr_of(DType t) {
  switch (t) {
    case DType::Float32: return "<f4";
    case DType::Float64: return "<f8";
    case DType::Float16: return "<f2";
    case DType::Int8: return "|i1";
    case DType::UInt8: return "|u1";
    case DType::Int16: return "<i2";
    case DType::Int32: return "<i4";
    case DType::Int64: return "<i8";
    case DType::Bool: return "|b1";
    default: return nullptr;
  }
}

DType dtype_of_descr(const std::string& d, const std::string& file) {
  for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::Int8, DType::UInt8,
                  DType::Int16, DType::Int32, DType::Int64, DType::Bool}) {
    std::string want = descr_of(t);
    if (d == want || (want[0] == '|' && d == "<" + want.substr(1)) || (want[0] == '<' && d == "=" + want.substr(1)))
      return t;
  }
  bad_input("'" + file + "': numpy dtype '" + d + "' is not supported (big-endian or non-numeric?)");
}

// Finds `'key': value` in the header dict and returns the raw value text.
std::string header_field(const std::string& h, const std::string& key, const std::string& file) {
  auto k = h.find("'" + key + "'");
  if (k == std::string::npos) bad_input("'" + file + "': .npy header lacks '" + key + "'");
  auto colon = h.find(':', k);
  size_t start = h.find_first_not_of(' ', colon + 1);
  if (h[start] == '(') return h.substr(start, h.find(')', start) - start + 1);
  size_t end = h.find_first_of(",}", start);
  return h.substr(start, end - start);
}

}  // namespace

Tensor read_npy(const fs::path& path) {
  std::string file = path.string();
  std::string bytes = read_file_bytes(path);
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) bad_input("'" + file + "' is not a .npy file");
  int major = static_cast<uint8_t>(bytes[6]);
  size_t header_len, pos;
  if (major == 1) {
    header_len = static_cast<uint8_t>(bytes[8]) | (static_cast<uint8_t>(bytes[9]) << 8);
    pos = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) bad_input("'" + file + "' is truncated");
    header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(static_cast<uint8_t>(bytes[8 + i])) << (8 * i);
    pos = 12;
  } else {
    bad_input("'" + file + "': unsupported .npy version " + std::to_string(major));
  }
  if (pos + header_len > bytes.size()) bad_input("'" + file + "': truncated .npy header");
  std::string h = bytes.substr(pos, header_len);
  std::string descr = header_field(h, "descr", file);
  if (descr.size() < 2) bad_input("'" + file + "': bad descr");
  descr = descr.substr(1, descr.size() - 2);
  if (header_field(h, "fortran_order", file).rfind("False", 0) != 0)
    bad_input("'" + file + "': Fortran-order arrays are not supported; save with np.ascontiguousarray");
  std::string shape = header_field(h, "shape", file);
  std::vector<int64_t> dims;
  std::string num;
  for (char c : shape) {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      num += c;
      if (num.size() > 18) bad_input("'" + file + "': dimension too large");
    } else if (!num.empty()) {
      dims.push_back(std::stoll(num));
      num.clear();
    }
  }
  DType t = dtype_of_descr(descr, file);
  Tensor out(t, dims);
  size_t data_pos = pos + header_len;
  if (bytes.size() - data_pos != out.nbytes())
    bad_input("'" + file + "': holds " + std::to_string(bytes.size() - data_pos) + " data bytes, shape " +
              dims_str(dims) + " needs " + std::to_string(out.nbytes()));
  if (out.nbytes()) std::memcpy(out.raw(), bytes.data() + data_pos, out.nbytes());
  return out;
}

void write_npy(const Tensor& t, const fs::path& path) {
  const char* descr = descr_of(t.dtype());
  if (!descr) bad_input(std::string("cannot write ") + dtype_name(t.dtype()) + " to .npy; use --format pb");
  std::string shape = "(";
  for (size_t i = 0; i < t.rank(); ++i) shape += std::to_string(t.dim(i)) + (t.rank() == 1 || i + 1 < t.rank() ? ", " : "");
  if (t.rank() > 1) shape.resize(shape.size());
  shape += ")";
  std::string h = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + h.size() + 1;
  h.append((64 - total % 64) % 64, ' ');
  h += '\n';
  AtomicFile out(path);
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
