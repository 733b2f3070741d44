#include "importer/tensor_proto.h"

#include "onnx/onnx-ml.pb.h"

#include <cstdint>
#include <optional>

#include "importer/file_claims.h"
#include "importer/input_file.h"
#include "ir/error.h"
#include "ir/memory_limit.h"

namespace fusec {

namespace fs = std::filesystem;

fs::path resolve_external_location(const fs::path& model_dir, const std::string& location, const std::string& what) {
  if (location.empty()) bad_input(what + ": external data has no location");
  fs::path loc(location);
  if (loc.is_absolute() || location.front() == '/' || location.front() == '\\')
    bad_input(what + ": external data location '" + location +
              "' is absolute; it must be relative to the model's folder");
  for (const auto& part : loc)
    if (part == "..") bad_input(what + ": external data location '" + location + "' leaves the model's folder");
  fs::path full = model_dir / loc;
  std::error_code ec;
  if (!fs::exists(full, ec)) bad_input(what + ": external data file '" + full.string() + "' does not exist");
  fs::path canon_dir = fs::weakly_canonical(model_dir.empty() ? fs::path(".") : model_dir, ec);
  fs::path canon = fs::weakly_canonical(full, ec);
  if (ec) bad_input(what + ": cannot resolve external data file '" + full.string() + "'");
  auto rel = canon.lexically_relative(canon_dir);
  if (rel.empty() || *rel.begin() == "..")
    bad_input(what + ": external data file '" + location + "' resolves outside the model's folder (symlink?)");
  if (!fs::is_regular_file(canon, ec)) bad_input(what + ": external data '" + location + "' is not a regular file");
  return canon;
}

namespace {

template <typename Src, typename Dst>
void copy_field(const Src& field, Dst* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<Dst>(field.Get(static_cast<int>(i)));
}

int64_t typed_field_size(const onnx::TensorProto& p, DType t) {
  switch (t) {
    case DType::Float32:
      return p.float_data_size();
    case DType::Float64:
      return p.double_data_size();
    case DType::Int64:
      return p.int64_data_size();
    default:
      return p.int32_data_size();
  }
}

}  // namespace

namespace {

/// A view of `bytes` at `data`, kept alive by `holder`, if the address suits the element type
/// (natural alignment: all the kernels need); otherwise nullopt and the caller copies.
std::optional<Tensor> view_if_aligned(DType t, const std::vector<int64_t>& dims, const void* data,
                                      std::shared_ptr<void> holder) {
  if (reinterpret_cast<uintptr_t>(data) % dtype_size(t) != 0) return std::nullopt;
  return Tensor::view(t, dims, const_cast<void*>(data), std::move(holder));
}

/// `raw`: the inline raw data (p.raw_data(), or taken out of p), nullptr if p has none; `owned`:
/// set when the caller gives up that string, so it can become the tensor's storage.
Tensor from_proto(const onnx::TensorProto& p, const std::string* raw, std::unique_ptr<std::string> owned,
                  const fs::path& model_dir, const std::string& what, MappedFiles* maps) {
  if (p.data_type() == onnx::TensorProto::STRING || p.string_data_size() > 0)
    unsupported(what + ": string tensors are not supported");
  DType t = dtype_from_onnx(p.data_type());
  if (t == DType::Undefined) unsupported(what + ": data type " + onnx_dtype_name(p.data_type()) + " is not supported");
  std::vector<int64_t> dims(p.dims().begin(), p.dims().end());
  for (int64_t d : dims)
    if (d < 0) bad_input(what + ": negative dimension " + std::to_string(d));
  int64_t n = 0;
  try {
    n = checked_numel(dims);
  } catch (const Error& e) {
    bad_input(what + ": " + e.what());
  }
  size_t esize = dtype_size(t);
  if (n > static_cast<int64_t>((uint64_t(1) << 40) / esize))
    bad_input(what + ": shape " + dims_str(dims) + " is too large");
  size_t expected = static_cast<size_t>(n) * esize;

  if (p.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string location;
    int64_t offset = 0, length = -1;
    for (const auto& kv : p.external_data()) {
      auto parse = [&](const std::string& s) -> int64_t {
        if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos)
          bad_input(what + ": external data " + kv.key() + " '" + s + "' is not a number");
        return std::stoll(s);
      };
      if (kv.key() == "location")
        location = kv.value();
      else if (kv.key() == "offset")
        offset = parse(kv.value());
      else if (kv.key() == "length")
        length = parse(kv.value());
    }
    fs::path file = resolve_external_location(model_dir, location, what);
    std::error_code ec;
    auto fsize = static_cast<int64_t>(fs::file_size(file, ec));
    if (ec) bad_input(what + ": cannot stat external data file '" + location + "'");
    if (length < 0) length = static_cast<int64_t>(expected);
    if (length != static_cast<int64_t>(expected))
      bad_input(what + ": external data length " + std::to_string(length) + " does not match shape " + dims_str(dims) +
                " of " + dtype_name(t) + " (" + std::to_string(expected) + " bytes)");
    if (offset > fsize || length > fsize - offset)
      bad_input(what + ": external data at offset " + std::to_string(offset) + " + " + std::to_string(length) +
                " bytes runs past the end of '" + location + "' (" + std::to_string(fsize) + " bytes)");
    note_input(file,
               maps && !maps->owner().empty() ? "the external data of " + maps->owner() : "external data of " + what);
    if (maps && !maps->contents()) return Tensor::view(t, dims, nullptr, nullptr);  // references checked only
    // A view into the mapped file where the offset suits the element type: no bytes are read
    // until something touches them. Otherwise (or where the file cannot be mapped) one read.
    MappedFiles local;
    if (auto map = (maps ? maps : &local)->get(file);
        map && expected > 0 && map->size() == static_cast<size_t>(fsize)) {
      const char* data = map->data() + offset;
      if (auto v = view_if_aligned(t, dims, data, std::shared_ptr<void>(map, const_cast<char*>(map->data()))))
        return *v;
    }
    check_allocation(expected, what);
    Tensor out(t, dims);
    InputFile in(file, {"external data of " + what});
    in.read_at(out.raw(), expected, static_cast<uint64_t>(offset));
    return out;
  }

  // Inline data: its size is checked against the declared shape before anything is allocated, so
  // a file of a few bytes cannot make fusec allocate gigabytes first.
  if (raw) {
    if (raw->size() != expected)
      bad_input(what + ": raw data has " + std::to_string(raw->size()) + " bytes but shape " + dims_str(dims) + " of " +
                dtype_name(t) + " needs " + std::to_string(expected));
    if (owned && expected > 0 && reinterpret_cast<uintptr_t>(owned->data()) % dtype_size(t) == 0) {
      // The parsed bytes become the tensor's storage: no second copy while the proto is dropped.
      host_memory().reserve(expected, what);
      std::shared_ptr<std::string> storage(owned.release(), [expected](std::string* str) {
        delete str;
        host_memory().release(expected);
      });
      return Tensor::view(t, dims, storage->data(), storage);
    }
    check_allocation(expected, what);
    Tensor out(t, dims);
    if (expected) std::memcpy(out.raw(), raw->data(), expected);
    return out;
  }
  int64_t have = typed_field_size(p, t);
  if (have != n)
    bad_input(what + ": has " + std::to_string(have) + " values but shape " + dims_str(dims) + " needs " +
              std::to_string(n));
  check_allocation(expected, what);
  Tensor out(t, dims);
  switch (t) {
    case DType::Float32:
      copy_field(p.float_data(), out.data<float>(), n);
      break;
    case DType::Float64:
      copy_field(p.double_data(), out.data<double>(), n);
      break;
    case DType::Int64:
      copy_field(p.int64_data(), out.data<int64_t>(), n);
      break;
    case DType::Int32:
      copy_field(p.int32_data(), out.data<int32_t>(), n);
      break;
    case DType::Int16:
      copy_field(p.int32_data(), out.data<int16_t>(), n);
      break;
    case DType::Int8:
      copy_field(p.int32_data(), out.data<int8_t>(), n);
      break;
    case DType::UInt8:
      copy_field(p.int32_data(), out.data<uint8_t>(), n);
      break;
    case DType::Bool:
      copy_field(p.int32_data(), out.data<uint8_t>(), n);
      break;
    case DType::Float16:
    case DType::BFloat16:
      copy_field(p.int32_data(), out.data<uint16_t>(), n);
      break;
    case DType::Undefined:
      break;
  }
  return out;
}

}  // namespace

Tensor tensor_from_proto(const onnx::TensorProto& p, const fs::path& model_dir, const std::string& what,
                         MappedFiles* maps) {
  return from_proto(p, p.has_raw_data() ? &p.raw_data() : nullptr, nullptr, model_dir, what, maps);
}

Tensor tensor_from_proto(onnx::TensorProto&& p, const fs::path& model_dir, const std::string& what, MappedFiles* maps) {
  std::unique_ptr<std::string> owned(p.has_raw_data() ? p.release_raw_data() : nullptr);
  const std::string* raw = owned.get();  // read before the move below (argument order is unspecified)
  return from_proto(p, raw, std::move(owned), model_dir, what, maps);
}

void tensor_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* p) {
  p->Clear();
  if (!name.empty()) p->set_name(name);
  p->set_data_type(static_cast<int32_t>(t.dtype()));
  for (int64_t d : t.dims()) p->add_dims(d);
  p->set_raw_data(std::string(static_cast<const char*>(t.raw()), t.nbytes()));
}

Tensor read_tensor_pb(const fs::path& file) {
  std::string bytes = read_input_file(file, kProtobufFileLimit, "protobuf's 2 GiB limit", {"an input tensor file"});
  onnx::TensorProto p;
  if (!p.ParseFromString(bytes)) bad_input("'" + file.string() + "' is not a valid TensorProto file");
  return tensor_from_proto(p, file.parent_path(), "tensor file '" + file.string() + "'");
}

void write_tensor_pb(const Tensor& t, const std::string& name, const fs::path& file, const OutputOptions& opts) {
  // The TensorProto's small fields, then its raw_data streamed from the tensor: no second copy.
  onnx::TensorProto head;
  if (!name.empty()) head.set_name(name);
  head.set_data_type(static_cast<int32_t>(t.dtype()));
  for (int64_t d : t.dims()) head.add_dims(d);
  std::string bytes = head.SerializeAsString();
  // raw_data (field 9, length-delimited): its tag, then the byte count as a varint.
  bytes.push_back(static_cast<char>((9 << 3) | 2));
  for (uint64_t v = t.nbytes();; v >>= 7) {
    if (v < 0x80) {
      bytes.push_back(static_cast<char>(v));
      break;
    }
    bytes.push_back(static_cast<char>((v & 0x7f) | 0x80));
  }
  OutputFile out(file, opts);
  out.write(bytes);
  out.write(t.raw(), t.nbytes());
  out.commit();
}

}  // namespace fusec
