#include "ir/attribute.h"

namespace fusec {

const char* attr_kind_name(const AttrValue& v) {
  static const char* names[] = {"float", "int",     "string",  "tensor", "graph", "floats",
                                "ints",  "strings", "tensors", "graphs", "opaque"};
  return names[v.index()];
}

bool attr_equal(const AttrValue& a, const AttrValue& b) {
  if (a.index() != b.index()) return false;
  if (auto* t = std::get_if<Tensor>(&a)) return t->bytes_equal(std::get<Tensor>(b));
  if (auto* g = std::get_if<SubGraph>(&a)) return g->serialized == std::get<SubGraph>(b).serialized;
  if (auto* o = std::get_if<OpaqueAttr>(&a))
    return o->onnx_type == std::get<OpaqueAttr>(b).onnx_type && o->serialized == std::get<OpaqueAttr>(b).serialized;
  if (auto* ts = std::get_if<std::vector<Tensor>>(&a)) {
    auto& us = std::get<std::vector<Tensor>>(b);
    if (ts->size() != us.size()) return false;
    for (size_t i = 0; i < ts->size(); ++i)
      if (!(*ts)[i].bytes_equal(us[i])) return false;
    return true;
  }
  if (auto* gs = std::get_if<std::vector<SubGraph>>(&a)) {
    auto& hs = std::get<std::vector<SubGraph>>(b);
    if (gs->size() != hs.size()) return false;
    for (size_t i = 0; i < gs->size(); ++i)
      if ((*gs)[i].serialized != hs[i].serialized) return false;
    return true;
  }
  if (auto* f = std::get_if<float>(&a)) {  // bit-exact, so NaN == NaN
    float g = std::get<float>(b);
    return std::memcmp(f, &g, 4) == 0;
  }
  if (auto* fs = std::get_if<std::vector<float>>(&a)) {
    auto& gs2 = std::get<std::vector<float>>(b);
    return fs->size() == gs2.size() && (fs->empty() || std::memcmp(fs->data(), gs2.data(), fs->size() * 4) == 0);
  }
  if (auto* i = std::get_if<int64_t>(&a)) return *i == std::get<int64_t>(b);
  if (auto* s = std::get_if<std::string>(&a)) return *s == std::get<std::string>(b);
  if (auto* is = std::get_if<std::vector<int64_t>>(&a)) return *is == std::get<std::vector<int64_t>>(b);
  if (auto* ss = std::get_if<std::vector<std::string>>(&a)) return *ss == std::get<std::vector<std::string>>(b);
  return false;
}

}  // namespace fusec
