#pragma once
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "ir/shape.h"

namespace fusec {

/// A host tensor: dtype, static dims and a pointer to contiguous row-major data. The data is
/// either owned (a fresh, 64-byte aligned allocation) or a view into storage someone else owns
/// (an arena, a memory-mapped file); `holder` keeps that storage alive.
class Tensor {
 public:
  Tensor() = default;
  /// Allocates zero-initialised storage.
  Tensor(DType dtype, std::vector<int64_t> dims);
  /// Allocates storage left as the allocator gives it, for a writer that fills every element before
  /// anything reads one (the CPU executor, for a kernel registered Writes::Every): zeroing it first
  /// is a whole extra pass over memory, where the arena is not planned (detectors' dynamic shapes).
  static Tensor uninitialized(DType dtype, std::vector<int64_t> dims);
  /// A view over external memory kept alive by `holder`.
  static Tensor view(DType dtype, std::vector<int64_t> dims, void* data, std::shared_ptr<void> holder);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t dim(size_t i) const { return dims_[i]; }
  size_t rank() const { return dims_.size(); }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  bool defined() const { return dtype_ != DType::Undefined; }

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  template <typename T>
  T* data() {
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data() const {
    return static_cast<const T*>(data_);
  }

  /// Same data, new dims (numel must match).
  Tensor reshaped(std::vector<int64_t> dims) const;
  /// Deep copy into fresh storage.
  Tensor clone() const;
  /// Element i converted to double / int64 (any dtype); for shape tensors and checks, not hot loops.
  double as_double(int64_t i) const;
  int64_t as_int64(int64_t i) const;
  /// All elements as int64 (shape-like inputs: Reshape's shape, Slice's starts, ...).
  std::vector<int64_t> to_int64_vector() const;
  bool bytes_equal(const Tensor& other) const;

  static Tensor scalar_float(float v);
  static Tensor from_int64(const std::vector<int64_t>& values, std::vector<int64_t> dims);
  static Tensor from_float(const std::vector<float>& values, std::vector<int64_t> dims);

 private:
  void allocate(bool zeroed);

  DType dtype_ = DType::Undefined;
  std::vector<int64_t> dims_;
  int64_t numel_ = 0;
  void* data_ = nullptr;
  std::shared_ptr<void> holder_;
};

/// 64-byte aligned storage of `bytes` bytes, zero-initialised unless `zeroed` is false.
std::shared_ptr<void> aligned_storage(size_t bytes, bool zeroed = true);

}  // namespace fusec
