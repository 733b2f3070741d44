// Errors carry the exit code a CLI user sees (docs: README "Exit codes"), so the library decides
// once, where it knows what went wrong, whether it was the user's input or our bug.
#pragma once
#include <stdexcept>
#include <string>

namespace fusec {

enum class ErrorKind {
  BadInput = 2,     // malformed model/file, bad flag value, unsupported op or dtype
  Internal = 1,     // a bug in fusec
  CheckFailed = 3,  // verification or regression gate failed
};

/// What code may act on beyond the exit code. A caller that recovers from one particular error
/// tests its cause, never the message's text (which is for people, and may change).
enum class ErrorCause {
  General,
  ShapeNeedsValues,  // a shape depends on an input's values, not only its dims: plan with the values
  Unsupported,       // valid ONNX that fusec does not implement (an op, opset, dtype or attribute value)
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& what, ErrorCause cause = ErrorCause::General, bool names_node = false)
      : std::runtime_error(what), kind_(kind), cause_(cause), names_node_(names_node) {}
  ErrorKind kind() const { return kind_; }
  ErrorCause cause() const { return cause_; }
  /// Whether the message already names the node it concerns (so no caller appends it again).
  bool names_node() const { return names_node_; }
  int exit_code() const { return static_cast<int>(kind_); }

 private:
  ErrorKind kind_;
  ErrorCause cause_;
  bool names_node_;
};

/// Throws a BadInput error; the message should name the file/node/op concerned.
[[noreturn]] inline void bad_input(const std::string& what) { throw Error(ErrorKind::BadInput, what); }
[[noreturn]] inline void internal_error(const std::string& what) { throw Error(ErrorKind::Internal, what); }
/// A BadInput error for valid ONNX that fusec does not implement (ErrorCause::Unsupported).
[[noreturn]] inline void unsupported(const std::string& what) {
  throw Error(ErrorKind::BadInput, what, ErrorCause::Unsupported);
}

/// " (node 'name', op Type)": the suffix every node-related message ends with.
inline std::string node_ref(const std::string& name, const std::string& op_type) {
  return " (node '" + name + "', op " + op_type + ")";
}

/// A BadInput error about one node: `what` then the node's ref (Node::ref(), node_ref()), marked
/// as naming it.
[[noreturn]] inline void bad_input_at(const std::string& what, const std::string& node_ref,
                                      ErrorCause cause = ErrorCause::General) {
  throw Error(ErrorKind::BadInput, what + node_ref, cause, /*names_node=*/true);
}

/// `e` with the node's ref appended, unless its message names a node already.
[[noreturn]] inline void rethrow_at_node(const Error& e, const std::string& node_ref) {
  if (e.names_node()) throw e;
  throw Error(e.kind(), e.what() + node_ref, e.cause(), /*names_node=*/true);
}

/// Runs f(). A BadInput error from it whose message names no node gets `ref()` appended, so
/// errors raised below the node level (a tensor's element count, an allocation) still say which
/// node they came from. `ref` is only called on that path.
template <typename F, typename R>
decltype(auto) with_node_context(R&& ref, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::BadInput || e.names_node()) throw;
    rethrow_at_node(e, ref());
  }
}

}  // namespace fusec
