#include "importer/onnx_export.h"

#include <onnx/onnx_pb.h>

#include <fstream>

#include "importer/tensor_proto.h"
#include "ir/error.h"

namespace fusec {

namespace fs = std::filesystem;

namespace {

constexpr size_t kProtobufLimit = (size_t(2) << 30) - (size_t(64) << 20);  // 2 GB less headroom

void write_type(const Value& v, onnx::ValueInfoProto* vi) {
  vi->set_name(v.name);
  if (!v.doc_string.empty()) vi->set_doc_string(v.doc_string);
  if (v.type.dtype == DType::Undefined && !v.type.shape) return;
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(static_cast<int32_t>(v.type.dtype));
  if (!v.type.shape) return;
  auto* shape = tt->mutable_shape();
  for (const Dim& d : *v.type.shape) {
    auto* dp = shape->add_dim();
    if (d.is_static()) dp->set_dim_value(d.value);
    else if (!d.symbol.empty()) dp->set_dim_param(d.symbol);
  }
}

void write_attr(const NamedAttribute& na, onnx::AttributeProto* a) {
  using A = onnx::AttributeProto;
  a->set_name(na.name);
  if (!na.attr.doc_string.empty()) a->set_doc_string(na.attr.doc_string);
  if (!na.attr.ref_attr_name.empty()) a->set_ref_attr_name(na.attr.ref_attr_name);
  const AttrValue& v = na.attr.value;
  if (auto* f = std::get_if<float>(&v)) { a->set_type(A::FLOAT); a->set_f(*f); }
  else if (auto* i = std::get_if<int64_t>(&v)) { a->set_type(A::INT); a->set_i(*i); }
  else if (auto* s = std::get_if<std::string>(&v)) { a->set_type(A::STRING); a->set_s(*s); }
  else if (auto* t = std::get_if<Tensor>(&v)) { a->set_type(A::TENSOR); tensor_to_proto(*t, "", a->mutable_t()); }
  else if (auto* g = std::get_if<OpaqueGraph>(&v)) {
    a->set_type(A::GRAPH);
    if (!a->mutable_g()->ParseFromString(g->serialized)) internal_error("corrupt subgraph attribute");
  } else if (auto* fs2 = std::get_if<std::vector<float>>(&v)) {
    a->set_type(A::FLOATS);
    for (float x : *fs2) a->add_floats(x);
  } else if (auto* is = std::get_if<std::vector<int64_t>>(&v)) {
    a->set_type(A::INTS);
    for (int64_t x : *is) a->add_ints(x);
  } else if (auto* ss = std::get_if<std::vector<std::string>>(&v)) {
    a->set_type(A::STRINGS);
    for (const auto& x : *ss) a->add_strings(x);
  } else if (auto* ts = std::get_if<std::vector<Tensor>>(&v)) {
    a->set_type(A::TENSORS);
    for (const auto& t : *ts) tensor_to_proto(t, "", a->add_tensors());
  } else if (auto* gs = std::get_if<std::vector<OpaqueGraph>>(&v)) {
    a->set_type(A::GRAPHS);
    for (const auto& g : *gs)
      if (!a->add_graphs()->ParseFromString(g.serialized)) internal_error("corrupt subgraph attribute");
  } else if (auto* o = std::get_if<OpaqueAttr>(&v)) {
    std::string name = a->name();
    if (!a->ParseFromString(o->serialized)) internal_error("corrupt opaque attribute");
    a->set_name(name);
  }
}

/// Builds the ModelProto; initializers whose `external` offset is set point at `data_file`.
void build_model(const Graph& g, onnx::ModelProto* m, const std::string& data_file,
                 const std::vector<std::pair<const Value*, size_t>>& external_offsets) {
  m->set_ir_version(g.meta.ir_version);
  if (!g.meta.producer_name.empty()) m->set_producer_name(g.meta.producer_name);
  if (!g.meta.producer_version.empty()) m->set_producer_version(g.meta.producer_version);
  if (!g.meta.domain.empty()) m->set_domain(g.meta.domain);
  if (g.meta.model_version) m->set_model_version(g.meta.model_version);
  if (!g.meta.doc_string.empty()) m->set_doc_string(g.meta.doc_string);
  for (const auto& [k, v] : g.meta.props) {
    auto* p = m->add_metadata_props();
    p->set_key(k);
    p->set_value(v);
  }
  for (const auto& [d, ver] : g.opsets) {
    auto* o = m->add_opset_import();
    o->set_domain(d);
    o->set_version(ver);
  }
  auto* gp = m->mutable_graph();
  gp->set_name(g.name);
  if (!g.doc_string.empty()) gp->set_doc_string(g.doc_string);
  std::unordered_map<const Value*, size_t> ext(external_offsets.begin(), external_offsets.end());
  for (const Value* v : g.initializers()) {
    auto* t = gp->add_initializer();
    auto it = ext.find(v);
    if (it == ext.end()) {
      tensor_to_proto(*v->initializer, v->name, t);
      continue;
    }
    t->set_name(v->name);
    t->set_data_type(static_cast<int32_t>(v->initializer->dtype()));
    for (int64_t d : v->initializer->dims()) t->add_dims(d);
    t->set_data_location(onnx::TensorProto::EXTERNAL);
    auto add = [&](const std::string& k, const std::string& val) {
      auto* e = t->add_external_data();
      e->set_key(k);
      e->set_value(val);
    };
    add("location", data_file);
    add("offset", std::to_string(it->second));
    add("length", std::to_string(v->initializer->nbytes()));
  }
  for (const Value* v : g.inputs) write_type(*v, gp->add_input());
  for (const Value* v : g.initializers())
    if (v->initializer_listed_as_input) write_type(*v, gp->add_input());
  for (const Value* v : g.outputs) write_type(*v, gp->add_output());
  for (const Value* v : g.values())
    if (v->in_value_info && !v->is_graph_input && !v->is_graph_output) write_type(*v, gp->add_value_info());
  for (const auto& np : g.nodes()) {
    auto* n = gp->add_node();
    n->set_name(np->name);
    n->set_op_type(np->op_type);
    if (!np->domain.empty()) n->set_domain(np->domain);
    if (!np->doc_string.empty()) n->set_doc_string(np->doc_string);
    for (const Value* v : np->inputs) n->add_input(v ? v->name : "");
    for (const Value* v : np->outputs) n->add_output(v ? v->name : "");
    for (const auto& a : np->attrs) write_attr(a, n->add_attribute());
  }
}

size_t total_initializer_bytes(const Graph& g) {
  size_t b = 0;
  for (const Value* v : g.initializers()) b += v->initializer->nbytes();
  return b;
}

}  // namespace

std::string export_onnx_bytes(const Graph& g) {
  if (total_initializer_bytes(g) > kProtobufLimit)
    bad_input("the model's tensors exceed protobuf's 2 GB limit; write it with external data");
  onnx::ModelProto m;
  build_model(g, &m, "", {});
  std::string out;
  if (!m.SerializeToString(&out)) internal_error("failed to serialize the model");
  return out;
}

bool export_onnx_file(const Graph& g, const fs::path& file, const ExportOptions& opts) {
  bool external = opts.external_data || total_initializer_bytes(g) > kProtobufLimit;
  std::vector<std::pair<const Value*, size_t>> offsets;
  std::string data_name = file.filename().string() + ".data";
  if (external) {
    fs::path data_path = file.parent_path() / data_name;
    std::ofstream data(data_path, std::ios::binary | std::ios::trunc);
    if (!data) bad_input("cannot write '" + data_path.string() + "'");
    size_t offset = 0;
    for (const Value* v : g.initializers()) {
      const Tensor& t = *v->initializer;
      if (t.nbytes() < opts.external_threshold) continue;
      size_t aligned = (offset + 4095) / 4096 * 4096;  // page-aligned, so readers can mmap
      if (aligned > offset) {
        std::string pad(aligned - offset, '\0');
        data.write(pad.data(), static_cast<std::streamsize>(pad.size()));
      }
      data.write(static_cast<const char*>(t.raw()), static_cast<std::streamsize>(t.nbytes()));
      offsets.push_back({v, aligned});
      offset = aligned + t.nbytes();
    }
    if (!data) bad_input("failed writing '" + data_path.string() + "'");
  }
  onnx::ModelProto m;
  build_model(g, &m, data_name, offsets);
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  if (!out) bad_input("cannot write '" + file.string() + "'");
  if (m.ByteSizeLong() > kProtobufLimit)
    bad_input("the model graph alone exceeds protobuf's 2 GB limit");
  if (!m.SerializeToOstream(&out)) bad_input("failed writing '" + file.string() + "'");
  return external;
}

}  // namespace fusec
