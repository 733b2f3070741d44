#include "importer/onnx_export.h"

#include <unordered_set>

#include "onnx/onnx-ml.pb.h"

#include "importer/file_claims.h"
#include "importer/mapped_file.h"
#include "importer/output_file.h"
#include "importer/tensor_proto.h"
#include "ir/error.h"
#include "ir/subgraph.h"

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
    if (d.is_static())
      dp->set_dim_value(d.value);
    else if (!d.symbol.empty())
      dp->set_dim_param(d.symbol);
  }
}

void write_attr(const NamedAttribute& na, onnx::AttributeProto* a) {
  using A = onnx::AttributeProto;
  a->set_name(na.name);
  if (!na.attr.doc_string.empty()) a->set_doc_string(na.attr.doc_string);
  if (!na.attr.ref_attr_name.empty()) a->set_ref_attr_name(na.attr.ref_attr_name);
  const AttrValue& v = na.attr.value;
  if (auto* f = std::get_if<float>(&v)) {
    a->set_type(A::FLOAT);
    a->set_f(*f);
  } else if (auto* i = std::get_if<int64_t>(&v)) {
    a->set_type(A::INT);
    a->set_i(*i);
  } else if (auto* s = std::get_if<std::string>(&v)) {
    a->set_type(A::STRING);
    a->set_s(*s);
  } else if (auto* t = std::get_if<Tensor>(&v)) {
    a->set_type(A::TENSOR);
    tensor_to_proto(*t, "", a->mutable_t());
  } else if (auto* g = std::get_if<SubGraph>(&v)) {
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
  } else if (auto* gs = std::get_if<std::vector<SubGraph>>(&v)) {
    a->set_type(A::GRAPHS);
    for (const auto& g : *gs)
      if (!a->add_graphs()->ParseFromString(g.serialized)) internal_error("corrupt subgraph attribute");
  } else if (auto* o = std::get_if<OpaqueAttr>(&v)) {
    std::string name = a->name();
    if (!a->ParseFromString(o->serialized)) internal_error("corrupt opaque attribute");
    a->set_name(name);
  }
}

/// n's first subgraph attribute with captured values (every one has the same list), or nullptr.
const SubGraph* first_subgraph(const Node& n) {
  for (const auto& a : n.attrs)
    if (auto* sg = std::get_if<SubGraph>(&a.attr.value); sg && !sg->captured.empty()) return sg;
  return nullptr;
}

/// An initializer whose data lives at `offset` of `data_file` (ONNX external data).
void external_tensor_proto(const Value& v, const std::string& data_file, size_t offset, onnx::TensorProto* t) {
  t->set_name(v.name);
  t->set_data_type(static_cast<int32_t>(v.initializer->dtype()));
  for (int64_t d : v.initializer->dims()) t->add_dims(d);
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const std::string& k, const std::string& val) {
    auto* e = t->add_external_data();
    e->set_key(k);
    e->set_value(val);
  };
  add("location", data_file);
  add("offset", std::to_string(offset));
  add("length", std::to_string(v.initializer->nbytes()));
}

/// Builds the ModelProto; initializers whose `external` offset is set point at `data_file`. With
/// `with_initializers` false the graph gets none (the file writer streams them after it).
void build_model(const Graph& g, onnx::ModelProto* m, const std::string& data_file,
                 const std::vector<std::pair<const Value*, size_t>>& external_offsets, bool with_initializers = true) {
  m->set_ir_version(g.meta.ir_version);  // the model's own, or what a pass raised it to with the opset
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
  for (const Value* v : with_initializers ? g.initializers() : std::vector<Value*>{}) {
    auto it = ext.find(v);
    if (it == ext.end())
      tensor_to_proto(*v->initializer, v->name, gp->add_initializer());
    else
      external_tensor_proto(*v, data_file, it->second, gp->add_initializer());
  }
  for (const Value* v : g.inputs) write_type(*v, gp->add_input());
  for (const Value* v : g.initializers())
    if (v->initializer_listed_as_input) write_type(*v, gp->add_input());
  for (const Value* v : g.outputs) write_type(*v, gp->add_output());
  for (const Value* v : g.values())
    if (v->in_value_info && !v->is_graph_input && !v->is_graph_output) write_type(*v, gp->add_value_info());
  std::unordered_set<std::string> renamed;  // old names given back already
  for (const auto& np : g.nodes()) {
    // A body reads its outer values by the names they had at import. One a pass replaced (another
    // value now, so another name) gets its old name back through an Identity.
    const size_t declared = declared_input_count(*np);
    if (const SubGraph* sg = first_subgraph(*np))
      for (size_t k = 0; k < sg->captured.size(); ++k) {
        const Value* v = np->inputs[declared + k];
        if (v->name == sg->captured[k] || !renamed.insert(sg->captured[k]).second) continue;
        if (g.find_value(sg->captured[k]))
          internal_error("the value '" + sg->captured[k] + "' a subgraph reads is now another one" + np->ref());
        auto* id = gp->add_node();
        id->set_name(np->name + "/captured_" + std::to_string(k));
        id->set_op_type("Identity");
        id->add_input(v->name);
        id->add_output(sg->captured[k]);
      }
    auto* n = gp->add_node();
    n->set_name(np->name);
    n->set_op_type(np->op_type);
    if (!np->domain.empty()) n->set_domain(np->domain);
    if (!np->doc_string.empty()) n->set_doc_string(np->doc_string);
    for (size_t i = 0; i < declared; ++i) n->add_input(np->inputs[i] ? np->inputs[i]->name : "");
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

namespace {

// Protobuf wire format, for streaming: a length-delimited field is its tag, the varint length and
// the bytes; fields of a message may come in any order and a parser merges them.
constexpr uint32_t kModelGraphField = 7, kGraphInitializerField = 5, kTensorRawDataField = 9;

void append_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

/// The tag and length of a length-delimited field holding `length` bytes.
std::string field_header(uint32_t field, uint64_t length) {
  std::string h;
  append_varint(h, (uint64_t{field} << 3) | 2);
  append_varint(h, length);
  return h;
}

/// Writes a tensor's bytes: file to file where they are unchanged bytes of a mapped file (they
/// never enter this process's memory), else from memory.
void write_tensor_bytes(OutputFile& out, const Tensor& t) {
  if (t.nbytes() == 0) return;
  if (auto range = find_mapped_range(t.raw(), t.nbytes()))
    out.copy_from(range->file->fd(), range->offset, t.nbytes());
  else
    out.write(t.raw(), t.nbytes());
}

/// An inline initializer's TensorProto without its data: name, type, dims (raw_data follows).
onnx::TensorProto inline_head(const Value& v) {
  onnx::TensorProto head;
  head.set_name(v.name);
  head.set_data_type(static_cast<int32_t>(v.initializer->dtype()));
  for (int64_t d : v.initializer->dims()) head.add_dims(d);
  return head;
}

/// Bytes of an inline initializer's TensorProto, its data included.
uint64_t inline_size(const Value& v) {
  const uint64_t n = v.initializer->nbytes();
  return inline_head(v).ByteSizeLong() + field_header(kTensorRawDataField, n).size() + n;
}

/// One initializer as a GraphProto field, written without building a second copy of its data:
/// the TensorProto's small fields, then its raw_data field streamed from the tensor.
void write_initializer(OutputFile& out, const Value& v, const onnx::TensorProto* external) {
  if (external) {
    const std::string body = external->SerializeAsString();
    const std::string h = field_header(kGraphInitializerField, body.size());
    out.write(h.data(), h.size());
    out.write(body.data(), body.size());
    return;
  }
  const Tensor& t = *v.initializer;
  const std::string head_bytes = inline_head(v).SerializeAsString();
  const std::string raw_header = field_header(kTensorRawDataField, t.nbytes());
  const std::string h = field_header(kGraphInitializerField, head_bytes.size() + raw_header.size() + t.nbytes());
  out.write(h.data(), h.size());
  out.write(head_bytes.data(), head_bytes.size());
  out.write(raw_header.data(), raw_header.size());
  write_tensor_bytes(out, t);
}

}  // namespace

bool export_onnx_file(const Graph& g, const fs::path& file, const ExportOptions& opts) {
  const bool external = opts.external_data || total_initializer_bytes(g) > kProtobufLimit;
  const std::string data_name = file.filename().string() + ".data";
  const std::vector<Value*> inits = g.initializers();

  // External data first: each large tensor page-aligned (so readers can map it), copied from its
  // source file when it is unchanged mapped data.
  std::vector<std::pair<const Value*, size_t>> offsets;
  std::unique_ptr<OutputFile> data;  // created for the first tensor that goes there
  if (external) {
    std::error_code ec;
    if (named_descriptor(file.string()) >= 0 || (fs::exists(file, ec) && !is_regular_output(file.string())))
      bad_input("cannot write a model with external data to '" + file.string() +
                "': its data file goes beside it, so it needs a file path");
    for (const Value* v : inits) {
      const Tensor& t = *v->initializer;
      if (t.nbytes() < opts.external_threshold) continue;
      // A name fusec derives: a symlink there is replaced, not followed.
      if (!data)
        data = std::make_unique<OutputFile>(file.parent_path() / data_name,
                                            OutputOptions{"the output model's external data", false, false});
      data->pad_to(4096);
      offsets.push_back({v, data->size()});
      write_tensor_bytes(*data, t);
    }
  }

  // The model: every field but the initializers serialized as usual, the graph's initializers
  // streamed after the rest of the graph (in their order), so no tensor is copied into a proto.
  onnx::ModelProto m;
  build_model(g, &m, data_name, offsets, /*with_initializers=*/false);
  onnx::GraphProto graph;
  graph.Swap(m.mutable_graph());
  m.clear_graph();
  const std::string model_bytes = m.SerializeAsString();
  const std::string graph_bytes = graph.SerializeAsString();
  std::unordered_map<const Value*, size_t> ext(offsets.begin(), offsets.end());
  std::vector<onnx::TensorProto> external_protos(inits.size());
  uint64_t inits_size = 0;
  for (size_t i = 0; i < inits.size(); ++i) {
    const Value* v = inits[i];
    uint64_t body;
    if (auto it = ext.find(v); it != ext.end()) {
      external_tensor_proto(*v, data_name, it->second, &external_protos[i]);
      body = external_protos[i].ByteSizeLong();
    } else {
      body = inline_size(*v);
    }
    inits_size += field_header(kGraphInitializerField, body).size() + body;
  }
  const uint64_t graph_size = graph_bytes.size() + inits_size;
  if (model_bytes.size() + graph_size > kProtobufLimit)
    bad_input(external
                  ? "the model's graph alone exceeds protobuf's 2 GB limit"
                  : "the model exceeds protobuf's 2 GB limit; write its tensors to external data (--external-data)");
  OutputFile out(file, {"the output model", true, false});
  out.write(model_bytes.data(), model_bytes.size());
  const std::string gh = field_header(kModelGraphField, graph_size);
  out.write(gh.data(), gh.size());
  out.write(graph_bytes.data(), graph_bytes.size());
  for (size_t i = 0; i < inits.size(); ++i)
    write_initializer(out, *inits[i], ext.count(inits[i]) ? &external_protos[i] : nullptr);
  if (out.size() != model_bytes.size() + gh.size() + graph_size) internal_error("streamed model size mismatch");
  // The data file goes into place before the model that refers to it.
  if (data) data->commit();
  out.commit();
  return data != nullptr;
}

}  // namespace fusec
