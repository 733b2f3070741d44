#include "importer/onnx_import.h"

#include "onnx/onnx-ml.pb.h"

#include <google/protobuf/io/coded_stream.h>

#include <map>
#include <unordered_set>

#include "importer/input_file.h"
#include "importer/mapped_file.h"
#include "importer/tensor_proto.h"
#include "ir/error.h"
#include "ir/op_schema.h"

namespace fusec {

namespace fs = std::filesystem;

namespace {

class Importer {
 public:
  Importer(const fs::path& dir, std::string file, const ImportOptions& opts)
      : dir_(dir), file_(std::move(file)), opts_(opts), maps_(opts.external_data_contents, file_) {}

  /// Imports `m`, taking inline initializer data out of it (the caller drops it afterwards).
  std::unique_ptr<Graph> run(onnx::ModelProto& m) {
    auto g = std::make_unique<Graph>();
    g->meta.ir_version = m.ir_version();
    g->meta.producer_name = m.producer_name();
    g->meta.producer_version = m.producer_version();
    g->meta.domain = m.domain();
    g->meta.model_version = m.model_version();
    g->meta.doc_string = m.doc_string();
    for (const auto& p : m.metadata_props()) g->meta.props.emplace_back(p.key(), p.value());
    check_version("IR version " + std::to_string(m.ir_version()), m.ir_version(), newest_supported_ir_version(),
                  "fusec reads", ", as onnx " FUSEC_ONNX_VERSION " defines it");
    for (const auto& o : m.opset_import()) {
      std::string d = canonical_domain(o.domain());
      if (o.version() <= 0)
        fail("opset import for domain '" + o.domain() + "' has version " + std::to_string(o.version()));
      if (const int64_t newest = newest_supported_opset(d))
        check_version("opset " + std::to_string(o.version()) + " of domain " + (d.empty() ? "ai.onnx" : d), o.version(),
                      newest, "fusec implements");
      g->opsets[d] = o.version();
    }
    if (!m.has_graph()) fail("the model has no graph");
    auto& gp = *m.mutable_graph();
    if (g->opsets.empty() && gp.node_size() > 0) fail("the model imports no opset");
    opsets_ = g->opsets;
    import_graph(*g, gp, {}, /*body=*/false);
    return g;
  }

 private:
  /// Fills `g` from `gp`: initializers, inputs (then `captured`, the outer values a body reads, as
  /// more inputs), nodes, value_info, outputs. A body's inputs may leave out their types.
  void import_graph(Graph& g, onnx::GraphProto& gp, const std::vector<std::string>& captured, bool body) {
    g.name = gp.name();
    g.doc_string = gp.doc_string();
    if (gp.sparse_initializer_size() > 0) fail_unsupported("sparse initializers are not supported");

    // Initializers first: graph inputs of the same name are IR<4 style defaults.
    for (auto& t : *gp.mutable_initializer()) {
      if (t.name().empty()) fail("an initializer has no name");
      if (g.find_value(t.name())) fail("initializer '" + t.name() + "' is defined twice");
      const std::string name = t.name();
      if (dtype_from_onnx(t.data_type()) == DType::Undefined)
        fail_unsupported("initializer '" + name + "'" + first_consumer(gp, name) + " has data type " +
                         onnx_dtype_name(t.data_type()) + ", which fusec has no kernels for");
      const bool external = t.data_location() == onnx::TensorProto::EXTERNAL;
      Tensor data = tensor_from_proto(std::move(t), dir_, "initializer '" + name + "'", &maps_);
      if (!body) {  // what the model's file says (a body's tensors are written back with it, verbatim)
        g.meta.external_data |= external;
        if (external) g.meta.external_bytes += static_cast<int64_t>(data.nbytes());
      }
      Value* v = g.add_initializer(name, std::move(data));
      if (v->name != name) internal_error("initializer renamed");
    }
    std::unordered_set<std::string> input_names;
    for (const auto& vi : gp.input()) {
      if (!input_names.insert(vi.name()).second) fail("graph input '" + vi.name() + "' is listed twice");
      if (Value* init = g.find_value(vi.name())) {
        init->initializer_listed_as_input = true;
        continue;
      }
      if (vi.name().empty()) fail("a graph input has no name");
      Value* v = g.add_named_value(vi.name());
      v->type = read_type(vi, "graph input '" + vi.name() + "'" + first_consumer(gp, vi.name()), body);
      v->doc_string = vi.doc_string();
      v->is_graph_input = true;
      g.inputs.push_back(v);
    }
    for (const auto& c : captured) {
      if (g.find_value(c)) internal_error("captured value '" + c + "' is also defined in the subgraph");
      Value* v = g.add_named_value(c);
      v->is_graph_input = true;
      g.inputs.push_back(v);
    }
    // Node outputs, so inputs can refer to nodes later in the file (we sort afterwards).
    for (const auto& np : gp.node())
      for (const auto& o : np.output()) {
        if (o.empty()) continue;
        if (Value* existing = g.find_value(o)) {
          std::string what = existing->is_graph_input     ? "a graph input"
                             : existing->is_initializer() ? "an initializer"
                                                          : "another node's output";
          fail("value '" + o + "' produced by node '" + np.name() + "' (op " + np.op_type() + ") is also " + what);
        }
        g.add_named_value(o);
      }
    for (const auto& np : gp.node()) import_node(g, np);
    for (const auto& vi : gp.value_info()) {
      Value* v = g.find_value(vi.name());
      if (!v) continue;  // value_info for a value nothing uses: harmless, dropped
      v->in_value_info = true;
      v->type = read_type(vi, "value_info '" + vi.name() + "'", /*lenient=*/true);
    }
    std::unordered_set<std::string> output_names;
    for (const auto& vi : gp.output()) {
      Value* v = g.find_value(vi.name());
      if (!v) fail("graph output '" + vi.name() + "' is not produced by any node, input or initializer");
      if (!output_names.insert(vi.name()).second) fail("graph output '" + vi.name() + "' is listed twice");
      TypeInfo declared = read_type(vi, "graph output '" + vi.name() + "'", /*lenient=*/true);
      if (declared.dtype != DType::Undefined || !v->type.shape) {
        if (!v->is_initializer() && !v->is_graph_input) v->type = declared;
      }
      v->is_graph_output = true;
      if (v->doc_string.empty()) v->doc_string = vi.doc_string();
      g.outputs.push_back(v);
    }
    validate_graph(g);
  }

  [[noreturn]] void fail(const std::string& what) const { bad_input(file_ + ": " + what); }
  [[noreturn]] void fail_unsupported(const std::string& what) const { unsupported(file_ + ": " + what); }

  /// " (input of node 'n', op T)" for the first node that reads `value`, for errors about the value.
  static std::string first_consumer(const onnx::GraphProto& gp, const std::string& value) {
    for (const auto& np : gp.node())
      for (const auto& in : np.input())
        if (in == value) return " (input of node '" + np.name() + "', op " + np.op_type() + ")";
    return "";
  }

  /// A version newer than `newest` is refused, or with --allow-newer-opset reported and accepted.
  void check_version(const std::string& what, int64_t version, int64_t newest, const std::string& who,
                     const std::string& note = "") const {
    if (version <= newest) return;
    const std::string msg =
        "the model uses " + what + ", newer than the newest " + who + " (" + std::to_string(newest) + note + ")";
    if (!opts_.allow_newer_versions) fail(msg + "; --allow-newer-opset loads it anyway");
    if (opts_.warn) opts_.warn(file_ + ": " + msg + "; loading it anyway (--allow-newer-opset)");
  }

  TypeInfo read_type(const onnx::ValueInfoProto& vi, const std::string& what, bool lenient = false) {
    TypeInfo t;
    if (!vi.has_type()) {
      if (lenient) return t;
      fail(what + " has no type");
    }
    const auto& tp = vi.type();
    if (!tp.has_tensor_type()) {
      std::string kind = tp.has_sequence_type()        ? "sequence"
                         : tp.has_map_type()           ? "map"
                         : tp.has_optional_type()      ? "optional"
                         : tp.has_sparse_tensor_type() ? "sparse tensor"
                                                       : "non-tensor";
      fail_unsupported(what + " has " + kind + " type, which fusec does not support");
    }
    const auto& tt = tp.tensor_type();
    t.dtype = dtype_from_onnx(tt.elem_type());
    if (t.dtype == DType::Undefined && !(lenient && tt.elem_type() == 0))
      fail_unsupported(what + " has data type " + onnx_dtype_name(tt.elem_type()) + ", which fusec has no kernels for");
    if (tt.has_shape()) {
      Shape s;
      for (const auto& d : tt.shape().dim()) {
        if (d.has_dim_value()) {
          if (d.dim_value() < 0) fail(what + " has negative dimension " + std::to_string(d.dim_value()));
          s.push_back(Dim(d.dim_value()));
        } else if (d.has_dim_param()) {
          s.push_back(Dim::sym(d.dim_param()));
        } else {
          s.push_back(Dim());
        }
      }
      std::vector<int64_t> statics;
      for (auto& d : s)
        if (d.is_static()) statics.push_back(d.value);
      try {
        checked_numel(statics);
      } catch (const Error&) {
        fail(what + " has shape " + shape_str(s) + ", more elements than fit in int64");
      }
      t.shape = std::move(s);
    }
    return t;
  }

  Attribute read_attr(const onnx::AttributeProto& a, const std::string& where) {
    Attribute out;
    out.doc_string = a.doc_string();
    out.ref_attr_name = a.ref_attr_name();
    using A = onnx::AttributeProto;
    A::AttributeType type = a.type();
    if (type == A::UNDEFINED) {  // very old files leave the type out; infer it from the field set
      if (a.has_f())
        type = A::FLOAT;
      else if (a.has_i())
        type = A::INT;
      else if (a.has_s())
        type = A::STRING;
      else if (a.has_t())
        type = A::TENSOR;
      else if (a.has_g())
        type = A::GRAPH;
      else if (a.floats_size())
        type = A::FLOATS;
      else if (a.ints_size())
        type = A::INTS;
      else if (a.strings_size())
        type = A::STRINGS;
      else
        fail("attribute '" + a.name() + "' of " + where + " has no type");
    }
    switch (type) {
      case A::FLOAT:
        out.value = a.f();
        break;
      case A::INT:
        out.value = a.i();
        break;
      case A::STRING:
        out.value = a.s();
        break;
      case A::TENSOR:
        out.value = tensor_from_proto(a.t(), dir_, "attribute '" + a.name() + "' of " + where, &maps_);
        break;
      case A::GRAPH:
        out.value = SubGraph{a.g().SerializeAsString(), nullptr, {}, {}};
        break;
      case A::FLOATS:
        out.value = std::vector<float>(a.floats().begin(), a.floats().end());
        break;
      case A::INTS:
        out.value = std::vector<int64_t>(a.ints().begin(), a.ints().end());
        break;
      case A::STRINGS:
        out.value = std::vector<std::string>(a.strings().begin(), a.strings().end());
        break;
      case A::TENSORS: {
        std::vector<Tensor> ts;
        for (const auto& t : a.tensors())
          ts.push_back(tensor_from_proto(t, dir_, "attribute '" + a.name() + "' of " + where, &maps_));
        out.value = std::move(ts);
        break;
      }
      case A::GRAPHS: {
        std::vector<SubGraph> gs;
        for (const auto& g : a.graphs()) gs.push_back({g.SerializeAsString(), nullptr, {}, {}});
        out.value = std::move(gs);
        break;
      }
      default: {
        // SPARSE_TENSOR(S), TYPE_PROTO(S): kept verbatim; no op fusec runs uses them.
        A copy = a;
        out.value = OpaqueAttr{static_cast<int32_t>(type), copy.SerializeAsString()};
      }
    }
    return out;
  }

  void import_node(Graph& g, const onnx::NodeProto& np) {
    std::string where = "node '" + np.name() + "' (op " + np.op_type() + ")";
    if (np.op_type().empty()) fail("a node has no op_type");
    std::vector<Value*> ins, outs;
    for (const auto& i : np.input()) {
      if (i.empty()) {
        ins.push_back(nullptr);
        continue;
      }
      Value* v = g.find_value(i);
      if (!v) fail("input '" + i + "' of " + where + " is not produced by any node, graph input or initializer");
      ins.push_back(v);
    }
    for (const auto& o : np.output()) outs.push_back(o.empty() ? nullptr : g.find_value(o));
    std::string name = np.name();
    if (name.empty()) name = g.unique_node_name(np.op_type());  // stable names for error messages
    Node* n = g.add_node(np.op_type(), ins, outs, name, canonical_domain(np.domain()));
    if (np.name().empty()) n->name = name;
    n->doc_string = np.doc_string();
    std::unordered_set<std::string> seen;
    for (const auto& a : np.attribute()) {
      if (!seen.insert(a.name()).second) fail("attribute '" + a.name() + "' is repeated on " + where);
      n->attrs.push_back({a.name(), read_attr(a, where)});
    }
    if (n->domain.empty() && (np.op_type() == "If" || np.op_type() == "Loop")) import_bodies(g, n, np, where);
  }

  /// Appends to `out` the names `gp` reads and does not define (its outer-scope references, those of
  /// subgraphs inside it included), each once, in the order first read.
  static void free_names(const onnx::GraphProto& gp, std::vector<std::string>& out,
                         std::unordered_set<std::string>& listed) {
    std::unordered_set<std::string> defined;
    for (const auto& t : gp.initializer()) defined.insert(t.name());
    for (const auto& vi : gp.input()) defined.insert(vi.name());
    for (const auto& np : gp.node())
      for (const auto& o : np.output()) defined.insert(o);
    auto read = [&](const std::string& name) {
      if (!name.empty() && !defined.count(name) && listed.insert(name).second) out.push_back(name);
    };
    for (const auto& np : gp.node()) {
      for (const auto& i : np.input()) read(i);
      for (const auto& a : np.attribute()) {
        std::vector<std::string> inner;
        std::unordered_set<std::string> inner_listed;
        if (a.has_g()) free_names(a.g(), inner, inner_listed);
        for (const auto& sg : a.graphs()) free_names(sg, inner, inner_listed);
        for (const auto& name : inner) read(name);
      }
    }
    for (const auto& vi : gp.output()) read(vi.name());
  }

  /// If's branches and Loop's body: imported, with the outer values they read appended to the
  /// node's inputs (the union over its subgraphs, so each body has the same captured inputs). A body
  /// with what fusec cannot run (a sequence-typed input, say) stays unimported, with the reason.
  void import_bodies(Graph& g, Node* n, const onnx::NodeProto& np, const std::string& where) {
    std::vector<std::string> captured;
    std::unordered_set<std::string> listed;
    for (const auto& a : np.attribute())
      if (a.has_g()) free_names(a.g(), captured, listed);
    for (const auto& name : captured) {
      Value* v = g.find_value(name);
      if (!v) fail("a subgraph of " + where + " reads '" + name + "', which is not defined outside it");
      g.set_input(n, n->inputs.size(), v);
    }
    for (size_t k = 0; k < n->attrs.size(); ++k) {
      auto* sg = std::get_if<SubGraph>(&n->attrs[k].attr.value);
      if (!sg) continue;
      sg->captured = captured;
      onnx::GraphProto gp = np.attribute(static_cast<int>(k)).g();
      auto body = std::make_shared<Graph>();
      body->opsets = opsets_;
      try {
        import_graph(*body, gp, captured, /*body=*/true);
      } catch (const Error& e) {
        std::string msg = e.what();
        if (msg.rfind(file_ + ": ", 0) == 0) msg = msg.substr(file_.size() + 2);
        msg = "in the " + n->attrs[k].name + " of " + where + ": " + msg;
        if (e.cause() != ErrorCause::Unsupported) fail(msg);
        sg->why_not = msg;
        continue;
      }
      sg->body = std::move(body);
    }
  }

  fs::path dir_;
  std::string file_;
  const ImportOptions& opts_;
  MappedFiles maps_;  // external-data files, mapped once each
  std::map<std::string, int64_t> opsets_;  // the model's, which its subgraphs share
};

}  // namespace

int64_t newest_supported_ir_version() { return onnx::Version::IR_VERSION; }

namespace {

/// Parses and imports `size` bytes of a serialized ModelProto.
std::unique_ptr<Graph> import_buffer(const char* data, size_t size, const fs::path& model_dir,
                                     const std::string& display_name, const ImportOptions& opts) {
  if (size == 0) bad_input(display_name + ": the file is empty");
  onnx::ModelProto m;
  {
    google::protobuf::io::CodedInputStream stream(reinterpret_cast<const uint8_t*>(data),
                                                  static_cast<int>(std::min<size_t>(size, INT32_MAX)));
    stream.SetTotalBytesLimit(INT32_MAX);
    if (!m.ParseFromCodedStream(&stream) || !stream.ConsumedEntireMessage())
      bad_input(display_name + ": not a valid ONNX model (protobuf parse failed: truncated or not an ONNX file)");
  }
  if (m.ir_version() == 0 && !m.has_graph())
    bad_input(display_name + ": not a valid ONNX model (no ir_version and no graph)");
  return Importer(model_dir, display_name, opts).run(m);
}

}  // namespace

std::unique_ptr<Graph> import_onnx_bytes(const std::string& bytes, const fs::path& model_dir,
                                         const std::string& display_name, const ImportOptions& opts) {
  return import_buffer(bytes.data(), bytes.size(), model_dir, display_name, opts);
}

std::unique_ptr<Graph> import_onnx_file(const fs::path& file, const ImportOptions& opts) {
  InputFile in(file, {"the input model"});
  // The file is parsed from a read-only map, not a copy in memory; the map goes once parsed.
  // Empty, not mappable, or a stream (a pipe, /dev/stdin): read, within protobuf's limit.
  std::shared_ptr<MappedFile> map = in.sized() ? MappedFile::map(in.fd(), file) : nullptr;
  const std::string bytes = map ? "" : in.read_all(kProtobufFileLimit, "protobuf's 2 GiB limit on a model");
  try {
    if (map) return import_buffer(map->data(), map->size(), file.parent_path(), file.string(), opts);
    return import_buffer(bytes.data(), bytes.size(), file.parent_path(), file.string(), opts);
  } catch (const Error& e) {
    // Every import error names the model file once.
    std::string msg = e.what();
    if (msg.rfind(file.string(), 0) == 0) throw;
    throw Error(e.kind(), file.string() + ": " + msg, e.cause());
  }
}

}  // namespace fusec
