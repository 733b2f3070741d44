// The signal ops on the CPU reference: windows, DFT, STFT, MelWeightMatrix. Expected values are
// numpy's (np.fft) and the ONNX reference's (onnx 1.23) for the same inputs.
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

Tensor run_node(const std::string& op, const std::vector<Tensor>& ins, std::vector<NamedAttribute> attrs = {},
                int64_t opset = 17) {
  GraphBuilder b(opset);
  std::vector<Value*> vs;
  for (size_t i = 0; i < ins.size(); ++i)
    vs.push_back(ins[i].dtype() == DType::Undefined
                     ? nullptr
                     : b.input("i" + std::to_string(i), ins[i].dtype(), shape_of(ins[i].dims())));
  b.output(b.node(op, vs, std::move(attrs), "sig"));
  auto g = b.build();
  std::vector<Tensor> given;
  for (const Tensor& t : ins)
    if (t.dtype() != DType::Undefined) given.push_back(t);
  return run_cpu(*g, given)[0];
}

Tensor scalar_int(int64_t v) { return int64s({v}, {}); }

/// [n, 1] real samples.
Tensor real_signal(std::vector<float> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return floats(std::move(v), {1, n, 1});
}

}  // namespace

TEST(CpuSignal, Windows) {
  expect_close(run_node("HammingWindow", {scalar_int(5)}, {attr("periodic", int64_t{0})}),
               floats({0.08695652f, 0.5434783f, 1, 0.5434783f, 0.08695652f}, {5}));
  expect_close(run_node("BlackmanWindow", {scalar_int(4)}), floats({0, 0.34f, 1, 0.34f}, {4}), 1e-6, 1e-6);
  expect_close(run_node("HannWindow", {scalar_int(4)}), floats({0, 0.5f, 1, 0.5f}, {4}), 1e-6, 1e-6);
  // A symmetric window of one sample is [1]; of none, empty.
  expect_close(run_node("HannWindow", {scalar_int(1)}, {attr("periodic", int64_t{0})}), floats({1}, {1}));
  expect_close(run_node("HannWindow", {scalar_int(0)}), floats({}, {0}));
  const Tensor w = run_node("HannWindow", {scalar_int(3)}, {attr("output_datatype", int64_t{11})});
  EXPECT_EQ(w.dtype(), DType::Float64);
}

TEST(CpuSignal, DftForwardPaddedOnesidedAndInverse) {
  const Tensor x = real_signal({1, -2, 0.5f, 3, -1});
  // dft_length 6 pads a zero.
  expect_close(run_node("DFT", {x, scalar_int(6)}),
               floats({1.5f, 0, -2.75f, 0.433012702f, 5.25f, 3.031088913f, -0.5f, 0, 5.25f, -3.031088913f, -2.75f,
                       -0.433012702f},
                      {1, 6, 2}),
               1e-5, 1e-5);
  expect_close(run_node("DFT", {x, Tensor()}, {attr("onesided", int64_t{1})}),
               floats({1.5f, 0, -2.758610463f, 2.420519647f, 4.508610463f, -1.789856038f}, {1, 3, 2}), 1e-5, 1e-5);
  // dft_length 3 drops the last two samples: [1, -2, 0.5].
  expect_close(run_node("DFT", {x, scalar_int(3)}),
               floats({-0.5f, 0, 1.75f, 2.165063509f, 1.75f, -2.165063509f}, {1, 3, 2}), 1e-5, 1e-5);
  // Inverse of a complex signal, along axis 1 of [1, 4, 2].
  const Tensor z = floats({1, 2, -1, 0.5f, 3, -1, 0.25f, 0}, {1, 4, 2});
  expect_close(run_node("DFT", {z}, {attr("inverse", int64_t{1})}),
               floats({0.8125f, 0.375f, -0.625f, 0.4375f, 1.1875f, 0.125f, -0.375f, 1.0625f}, {1, 4, 2}), 1e-5, 1e-6);
}

TEST(CpuSignal, DftOnesidedInverseIsARealSignal) {
  // numpy's irfft of [4, 1-2j, -0.5+1j, 2+3j]: n = 6 by default (2·(4 - 1)), and n = 5 reads three.
  const Tensor half = floats({4, 0, 1, -2, -0.5f, 1, 2, 3}, {1, 4, 2});
  const std::vector<NamedAttribute> inv{attr("inverse", int64_t{1}), attr("onesided", int64_t{1})};
  expect_close(run_node("DFT", {half}, inv),
               floats({1.166666667f, 0.872008468f, 1.78269207f, -0.166666667f, 0.050641263f, 0.294658199f}, {1, 6, 1}),
               1e-5, 1e-6);
  expect_close(run_node("DFT", {half, scalar_int(5)}, inv),
               floats({1, 1.611141309f, 1.265240612f, -0.436061005f, 0.559679085f}, {1, 5, 1}), 1e-5, 1e-6);
}

TEST(CpuSignal, DftAxisIsAnInputFromOpset20) {
  // [2, 3, 1] along axis 0 (opset 20's input) equals the same signals laid along axis 1.
  const Tensor x = floats({1, 2, 3, -1, 0.5f, 4}, {2, 3, 1});
  const Tensor along0 = run_node("DFT", {x, Tensor(), scalar_int(0)}, {}, 20);
  const Tensor t = floats({1, -1, 2, 0.5f, 3, 4}, {3, 2, 1});
  const Tensor along1 = run_node("DFT", {t}, {attr("axis", int64_t{1})}, 17);
  ASSERT_EQ(along0.dims(), (std::vector<int64_t>{2, 3, 2}));
  for (int64_t k = 0; k < 2; ++k)
    for (int64_t s = 0; s < 3; ++s)
      for (int64_t c = 0; c < 2; ++c)
        EXPECT_NEAR(along0.as_double((k * 3 + s) * 2 + c), along1.as_double((s * 2 + k) * 2 + c), 1e-6);
  // The trailing complex dim is not a signal axis, counted from the front or, as -1, from the back
  // (fuzz finding 18), as an input or as opset 17's attribute.
  for (int64_t axis : {int64_t{2}, int64_t{-1}}) {
    SCOPED_TRACE(axis);
    try {
      run_node("DFT", {x, Tensor(), scalar_int(axis)}, {}, 20);
      ADD_FAILURE() << "axis " << axis << " of a [2, 3, 1] input (opset 20)";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not a signal axis"), std::string::npos) << e.what();
    }
    try {
      run_node("DFT", {x}, {attr("axis", axis)}, 17);
      ADD_FAILURE() << "axis " << axis << " of a [2, 3, 1] input (opset 17)";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not a signal axis"), std::string::npos) << e.what();
    }
  }
}

TEST(CpuSignal, StftFramesAWindowedSignal) {
  const Tensor sig = real_signal({0.5f, 1, -1, 2, 0, -0.5f, 1.5f, 3});
  const Tensor got = run_node("STFT", {sig, scalar_int(3), floats({0.2f, 1, 0.7f, 0.4f}, {4})});
  // Frames start at 0 and 3 (a third would need samples 6..9).
  expect_close(got, floats({1.2f, 0, 0.8f, -0.2f, -2.4f, 0, 0.65f, 0, 0.75f, 0.6f, -0.55f, 0}, {1, 2, 3, 2}), 1e-5,
               1e-6);
  try {
    run_node("STFT", {sig, scalar_int(3), floats({1, 1, 1}, {3}), scalar_int(4)});
    ADD_FAILURE() << "a 3-sample window for 4-sample frames";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("frame_length is 4"), std::string::npos) << e.what();
  }
}

TEST(CpuSignal, MelWeightMatrixTriangles) {
  const Tensor m = run_node("MelWeightMatrix",
                            {scalar_int(3), scalar_int(32), scalar_int(1000), floats({50}, {}), floats({480}, {})});
  ASSERT_EQ(m.dims(), (std::vector<int64_t>{17, 3}));
  std::vector<float> want(51, 0);
  const std::vector<std::tuple<int, int, float>> nonzero{
      {2, 0, 0.5f},     {3, 0, 1}, {4, 0, 2.0f / 3},  {4, 1, 1.0f / 3}, {5, 0, 1.0f / 3},
      {5, 1, 2.0f / 3}, {6, 1, 1}, {7, 1, 2.0f / 3},  {7, 2, 1.0f / 3}, {8, 1, 1.0f / 3},
      {8, 2, 2.0f / 3}, {9, 2, 1}, {10, 2, 2.0f / 3}, {11, 2, 1.0f / 3}};
  for (const auto& [j, i, v] : nonzero) want[static_cast<size_t>(j * 3 + i)] = v;
  expect_close(m, floats(want, {17, 3}));
  // An upper edge far above Nyquist (the mel scale overflows to inf) is an error, not a cast of inf.
  try {
    run_node("MelWeightMatrix",
             {scalar_int(3), scalar_int(32), scalar_int(1000), floats({50}, {}), floats({1e30f}, {})});
    ADD_FAILURE() << "an upper edge of 1e30 Hz at a 1 kHz sample rate";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("above the Nyquist frequency"), std::string::npos) << e.what();
  }
}
