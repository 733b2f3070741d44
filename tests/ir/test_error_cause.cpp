// What callers act on in an error is its kind, cause and whether it names a node, never its text:
// the conformance runner sorts "unsupported" from "fail" by ErrorCause::Unsupported, and
// with_node_context appends a node only to a message that names none (Error::names_node).
#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "ir/error.h"
#include "ir/graph_builder.h"
#include "passes/infer_shapes.h"

using namespace fusec;

namespace {

/// The error f() throws; fails the test when it throws none.
template <typename F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error";
  return Error(ErrorKind::Internal, "");
}

/// Shape inference of a one-node graph over x [2, 3, 4, 5].
Error infer_error(const std::string& op, std::vector<NamedAttribute> attrs, DType dt = DType::Float32) {
  GraphBuilder b(19);
  Value* x = b.input("x", dt, Shape{2, 3, 4, 5});
  b.output(b.node(op, {x}, std::move(attrs), "the_node"));
  auto g = b.build();
  return error_of([&] { infer_shapes(*g); });
}

int count(const std::string& s, const std::string& part) {
  int n = 0;
  for (size_t p = s.find(part); p != std::string::npos; p = s.find(part, p + 1)) ++n;
  return n;
}

}  // namespace

TEST(ErrorCause, AnAttributeValueFusecDoesNotImplementIsUnsupported) {
  Error e = infer_error("Resize", {attr("mode", std::string("bicubic-ish"))});
  EXPECT_EQ(e.kind(), ErrorKind::BadInput) << e.what();
  EXPECT_EQ(e.cause(), ErrorCause::Unsupported) << e.what();
  EXPECT_TRUE(e.names_node());
  EXPECT_EQ(count(e.what(), "(node 'the_node', op Resize)"), 1) << e.what();
}

TEST(ErrorCause, AMalformedNodeIsBadInputButNotUnsupported) {
  // Transpose's perm must be a permutation of the rank: a broken model, not a gap in fusec.
  Error e = infer_error("Transpose", {attr("perm", std::vector<int64_t>{0, 0, 1, 2})});
  EXPECT_EQ(e.kind(), ErrorKind::BadInput) << e.what();
  EXPECT_EQ(e.cause(), ErrorCause::General) << e.what();
  EXPECT_EQ(count(e.what(), "(node 'the_node', op Transpose)"), 1) << e.what();
}

TEST(ErrorCause, AnOpWithNoKernelIsUnsupportedWhenCompiled) {
  GraphBuilder b(19);
  Value* x = b.input("x", DType::Float32, Shape{4});
  Value* y = b.node("NoSuchOp", {x}, {}, "mystery");
  y->type.dtype = DType::Float32;
  y->type.shape = Shape{4};
  b.output(y);
  auto g = b.build();
  cpu::CpuBackend be;
  Error e = error_of([&] { be.compile(*g); });
  EXPECT_EQ(e.cause(), ErrorCause::Unsupported) << e.what();
  EXPECT_NE(std::string(e.what()).find("mystery"), std::string::npos) << e.what();
}

TEST(ErrorCause, WithNodeContextAppendsTheNodeOnceAndOnlyToBadInput) {
  auto ref = [] { return node_ref("n1", "Add"); };
  // Below the node level: the node is appended, the cause kept.
  Error a = error_of([&] { with_node_context(ref, [] { unsupported("no kernel for this dtype"); }); });
  EXPECT_EQ(std::string(a.what()), "no kernel for this dtype (node 'n1', op Add)");
  EXPECT_EQ(a.cause(), ErrorCause::Unsupported);
  EXPECT_TRUE(a.names_node());
  // Named already: left as it is, even if another context wraps it.
  Error b = error_of([&] {
    with_node_context(ref, [&] { with_node_context(ref, [] { bad_input("tensor too large"); }); });
  });
  EXPECT_EQ(std::string(b.what()), "tensor too large (node 'n1', op Add)");
  // A message whose text merely looks like a node reference still gets the node: the flag
  // decides, not the text.
  Error c = error_of([&] { with_node_context(ref, [] { bad_input("value (node 'x', op Y) is odd"); }); });
  EXPECT_EQ(std::string(c.what()), "value (node 'x', op Y) is odd (node 'n1', op Add)");
  // Internal errors are not the user's node's fault: untouched.
  Error d = error_of([&] { with_node_context(ref, [] { internal_error("bug"); }); });
  EXPECT_EQ(std::string(d.what()), "bug");
  EXPECT_FALSE(d.names_node());
}
