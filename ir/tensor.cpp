#include "ir/tensor.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "ir/error.h"
#include "ir/half.h"
#include "ir/memory_limit.h"

namespace fusec {

std::shared_ptr<void> aligned_storage(size_t bytes, bool zeroed) {
  // Checked against the host budget before asking the allocator, which may overcommit now and be
  // killed later; the budget counts the bytes until the storage is freed.
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  while (!host_memory().try_reserve(rounded)) host_memory().check(rounded, "a tensor");
  void* p = std::aligned_alloc(64, rounded);
  if (!p) {
    host_memory().release(rounded);
    bad_input("out of host memory allocating " + std::to_string(bytes) + " bytes");
  }
  if (zeroed) std::memset(p, 0, rounded);
  return std::shared_ptr<void>(p, [rounded](void* q) {
    std::free(q);
    host_memory().release(rounded);
  });
}

Tensor::Tensor(DType dtype, std::vector<int64_t> dims)
    : dtype_(dtype), dims_(std::move(dims)), numel_(checked_numel(dims_)) {
  allocate(true);
}

Tensor Tensor::uninitialized(DType dtype, std::vector<int64_t> dims) {
  Tensor t;
  t.dtype_ = dtype;
  t.dims_ = std::move(dims);
  t.numel_ = checked_numel(t.dims_);
  t.allocate(false);
  return t;
}

void Tensor::allocate(bool zeroed) {
  size_t esize = dtype_size(dtype_);
  if (esize && numel_ > static_cast<int64_t>((uint64_t(1) << 62) / esize))
    bad_input("tensor of shape " + dims_str(dims_) + " is too large");
  holder_ = aligned_storage(nbytes(), zeroed);
  data_ = holder_.get();
}

Tensor Tensor::view(DType dtype, std::vector<int64_t> dims, void* data, std::shared_ptr<void> holder) {
  Tensor t;
  t.dtype_ = dtype;
  t.dims_ = std::move(dims);
  t.numel_ = checked_numel(t.dims_);
  t.data_ = data;
  t.holder_ = std::move(holder);
  return t;
}

Tensor Tensor::reshaped(std::vector<int64_t> dims) const {
  if (checked_numel(dims) != numel_) internal_error("reshaped: " + dims_str(dims_) + " -> " + dims_str(dims));
  Tensor t = *this;
  t.dims_ = std::move(dims);
  return t;
}

Tensor Tensor::clone() const {
  Tensor t(dtype_, dims_);
  if (nbytes()) std::memcpy(t.data_, data_, nbytes());
  return t;
}

double Tensor::as_double(int64_t i) const {
  switch (dtype_) {
    case DType::Float32:
      return data<float>()[i];
    case DType::Float64:
      return data<double>()[i];
    case DType::Float16:
      return half_to_float(data<uint16_t>()[i]);
    case DType::BFloat16:
      return bf16_to_float(data<uint16_t>()[i]);
    case DType::Int8:
      return data<int8_t>()[i];
    case DType::UInt8:
      return data<uint8_t>()[i];
    case DType::Int16:
      return data<int16_t>()[i];
    case DType::Int32:
      return data<int32_t>()[i];
    case DType::Int64:
      return static_cast<double>(data<int64_t>()[i]);
    case DType::Bool:
      return data<uint8_t>()[i] ? 1.0 : 0.0;
    case DType::Undefined:
      break;
  }
  internal_error("as_double on undefined tensor");
}

int64_t Tensor::as_int64(int64_t i) const {
  switch (dtype_) {
    case DType::Int64:
      return data<int64_t>()[i];
    case DType::Int32:
      return data<int32_t>()[i];
    case DType::Int16:
      return data<int16_t>()[i];
    case DType::Int8:
      return data<int8_t>()[i];
    case DType::UInt8:
    case DType::Bool:
      return data<uint8_t>()[i];
    default: {
      // Saturating: a float outside int64 (or NaN) has no int64 value, and the plain cast is
      // undefined behaviour.
      const double d = as_double(i);
      if (std::isnan(d)) return 0;
      if (d >= 9223372036854775808.0) return INT64_MAX;
      if (d < -9223372036854775808.0) return INT64_MIN;
      return static_cast<int64_t>(d);
    }
  }
}

std::vector<int64_t> Tensor::to_int64_vector() const {
  std::vector<int64_t> v(static_cast<size_t>(numel_));
  for (int64_t i = 0; i < numel_; ++i) v[i] = as_int64(i);
  return v;
}

bool Tensor::bytes_equal(const Tensor& o) const {
  return dtype_ == o.dtype_ && dims_ == o.dims_ && (nbytes() == 0 || std::memcmp(data_, o.data_, nbytes()) == 0);
}

Tensor Tensor::scalar_float(float v) {
  Tensor t(DType::Float32, {});
  *t.data<float>() = v;
  return t;
}

Tensor Tensor::from_int64(const std::vector<int64_t>& values, std::vector<int64_t> dims) {
  Tensor t(DType::Int64, std::move(dims));
  if (static_cast<int64_t>(values.size()) != t.numel()) internal_error("from_int64: size mismatch");
  if (!values.empty()) std::memcpy(t.data_, values.data(), values.size() * 8);
  return t;
}

Tensor Tensor::from_float(const std::vector<float>& values, std::vector<int64_t> dims) {
  Tensor t(DType::Float32, std::move(dims));
  if (static_cast<int64_t>(values.size()) != t.numel()) internal_error("from_float: size mismatch");
  if (!values.empty()) std::memcpy(t.data_, values.data(), values.size() * 4);
  return t;
}

}  // namespace fusec
