#include "passes/attention_mask.h"

#include <algorithm>
#include <cstring>

namespace fusec {

namespace {

constexpr size_t kMaskInput = 3;  // attn_mask, in ONNX Attention and ai.fusec Attention alike

bool masks_nothing(const Tensor& m) {
  if (m.dtype() == DType::Bool) {
    const auto* p = static_cast<const unsigned char*>(m.raw());
    for (int64_t i = 0; i < m.numel(); ++i)
      if (!p[i]) return false;
    return true;
  }
  if (!is_float(m.dtype())) return false;
  for (int64_t i = 0; i < m.numel(); ++i)
    if (m.as_double(i) != 0.0) return false;
  return true;
}

/// True when the mask has a query dim over 1 whose rows are all the same bytes.
bool rows_repeat(const Tensor& m) {
  const auto& d = m.dims();
  if (d.size() < 2 || d[d.size() - 2] <= 1) return false;
  const int64_t rows = d[d.size() - 2];
  const size_t row_bytes = static_cast<size_t>(d.back()) * dtype_size(m.dtype());
  const int64_t outer = m.numel() / (rows * std::max<int64_t>(1, d.back()));
  const auto* p = static_cast<const char*>(m.raw());
  for (int64_t o = 0; o < outer; ++o) {
    const char* first = p + static_cast<size_t>(o * rows) * row_bytes;
    for (int64_t r = 1; r < rows; ++r)
      if (std::memcmp(first, first + r * row_bytes, row_bytes) != 0) return false;
  }
  return true;
}

/// The mask's first query row of each outer index: dims [.., 1, Skv].
Tensor first_rows(const Tensor& m) {
  auto d = m.dims();
  const int64_t rows = d[d.size() - 2];
  const size_t row_bytes = static_cast<size_t>(d.back()) * dtype_size(m.dtype());
  d[d.size() - 2] = 1;
  Tensor out(m.dtype(), d);
  const int64_t outer = out.numel() / std::max<int64_t>(1, d.back());
  const auto* src = static_cast<const char*>(m.raw());
  auto* dst = static_cast<char*>(out.raw());
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + o * row_bytes, src + static_cast<size_t>(o * rows) * row_bytes, row_bytes);
  return out;
}

}  // namespace

bool simplify_attention_masks(Graph& g, PassContext& ctx, const char* pass) {
  bool changed = false;
  for (Node* n : g.node_list()) {
    if (n->op_type != "Attention" || (n->domain != "" && n->domain != "ai.onnx" && n->domain != "ai.fusec")) continue;
    Value* mv = n->input(kMaskInput);
    if (!mv || !mv->is_initializer() || !mv->initializer->raw() || mv->initializer->numel() == 0) continue;
    const Tensor& m = *mv->initializer;
    if (masks_nothing(m)) {
      g.set_input(n, kMaskInput, nullptr);
      while (!n->inputs.empty() && !n->inputs.back()) n->inputs.pop_back();
      ctx.rewrite(pass,
                  describe(n) + ": constant mask '" + mv->name + "' " + dims_str(m.dims()) + " masks nothing, dropped",
                  {}, n->name);
      changed = true;
    } else if (rows_repeat(m)) {
      Tensor row = first_rows(m);
      const std::string dims = dims_str(row.dims());
      g.set_input(n, kMaskInput, g.add_initializer(mv->name + ".row", std::move(row)));
      ctx.rewrite(pass,
                  describe(n) + ": constant mask '" + mv->name + "' " + dims_str(m.dims()) +
                      " is the same for every query row, kept as " + dims,
                  {}, n->name);
      changed = true;
    }
  }
  if (changed) g.remove_unused_values();
  return changed;
}

}  // namespace fusec
