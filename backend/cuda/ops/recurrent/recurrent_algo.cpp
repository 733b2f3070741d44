#include "backend/cuda/ops/recurrent/recurrent_algo.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <exception>
#include <string>
#include <vector>

#include "backend/cuda/core/captured_reps.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/dnn_check.h"
#include "backend/cuda/core/tuning_cache.h"
#include "ir/switches.h"

namespace fusec::cuda {

namespace {

constexpr cudnnRNNAlgo_t kAlgos[] = {CUDNN_RNN_ALGO_STANDARD, CUDNN_RNN_ALGO_PERSIST_STATIC,
                                     CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H, CUDNN_RNN_ALGO_PERSIST_DYNAMIC};

/// FUSEC_RNN_ALGO's algorithm, or nullptr when it names none.
const cudnnRNNAlgo_t* forced_algo() {
  const char* e = env_switch("FUSEC_RNN_ALGO");
  if (!e) return nullptr;
  const std::string v = e;
  const char* names[] = {"standard", "static", "small_h", "dynamic"};
  for (size_t i = 0; i < 4; ++i)
    if (v == names[i]) return &kAlgos[i];
  return nullptr;
}

/// Sets d up for algo. The standard algorithm's NOT_SUPPORTED or BAD_PARAM refuses the node (false,
/// with why); its other failures are errors. A persistent algorithm's failure of any kind only
/// leaves it out of the race (false): cuDNN builds the dynamic one with NVRTC at this point.
bool set_up(const RnnProblem& p, cudnnHandle_t h, cudnnRNNAlgo_t algo, RnnAlgo* d, std::string* why) {
  d->algo = algo;
  auto accepts = [&](cudnnStatus_t st, const char* call) {
    if (st == CUDNN_STATUS_SUCCESS) return true;
    if (algo == CUDNN_RNN_ALGO_STANDARD && st != CUDNN_STATUS_NOT_SUPPORTED && st != CUDNN_STATUS_BAD_PARAM)
      throw_cudnn_error(st, call, __FILE__, __LINE__);
    *why = std::string("cuDNN's RNN: ") + call + " refused the configuration (" + cudnnGetErrorString(st) + ")";
    return false;
  };
  DNN_CHECK(cudnnCreateRNNDescriptor(&d->desc));
  const auto hidden = static_cast<int32_t>(p.hidden);
  if (!accepts(cudnnSetRNNDescriptor_v8(d->desc, algo, p.mode, CUDNN_RNN_DOUBLE_BIAS,
                                        p.dirs == 2 ? CUDNN_BIDIRECTIONAL : CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT,
                                        p.data, CUDNN_DATA_FLOAT, p.math, static_cast<int32_t>(p.input), hidden, hidden,
                                        1, p.dropout, CUDNN_RNN_PADDED_IO_ENABLED),
               "cudnnSetRNNDescriptor_v8"))
    return false;
  if (algo == CUDNN_RNN_ALGO_PERSIST_DYNAMIC &&
      !accepts(cudnnBuildRNNDynamic(h, d->desc, static_cast<int>(p.batch)), "cudnnBuildRNNDynamic"))
    return false;
  if (!accepts(
          cudnnGetRNNTempSpaceSizes(h, d->desc, CUDNN_FWD_MODE_INFERENCE, p.x, &d->workspace_bytes, &d->reserve_bytes),
          "cudnnGetRNNTempSpaceSizes"))
    return false;
  return accepts(cudnnGetRNNWeightSpaceSize(h, d->desc, &d->weight_bytes), "cudnnGetRNNWeightSpaceSize");
}

std::string problem_key(const RnnProblem& p, int device) {
  std::string k = "rnn|cudnn ";
  for (const std::string& part :
       {std::to_string(cudnnGetVersion()), std::string("|"), tuning_device_key(device), std::string("|mode "),
        std::to_string(static_cast<int>(p.mode)), std::string(" data "), std::to_string(static_cast<int>(p.data)),
        std::string(" math "), std::to_string(static_cast<int>(p.math))})
    k += part;
  for (int64_t v : {p.dirs, p.seq, p.batch, p.input, p.hidden, int64_t(p.batch_major)}) {
    k += '|';
    k += std::to_string(v);  // not "|" + to_string(v), which trips g++ 12's -Wrestrict
  }
  return k;
}

/// Times the candidates' forward calls on scratch buffers (zero weights: cuDNN's kernels take as
/// long whatever the values) and returns the fastest's index, or cands.size() where none ran.
size_t race(const RnnProblem& p, Context& ctx, const std::vector<std::unique_ptr<RnnAlgo>>& cands) {
  const size_t es = p.elem_bytes;
  size_t ws_bytes = 16, w_bytes = 16;
  for (const auto& c : cands) {
    ws_bytes = std::max(ws_bytes, (c->workspace_bytes + 255) / 256 * 256 + c->reserve_bytes);
    w_bytes = std::max(w_bytes, c->weight_bytes);
  }
  const size_t state = static_cast<size_t>(p.dirs * p.batch * p.hidden) * es;
  DeviceBuffer x(static_cast<size_t>(p.seq * p.batch * p.input) * es, "RNN algorithm tuning"),
      y(static_cast<size_t>(p.seq * p.batch * p.dirs * p.hidden) * es, "RNN algorithm tuning"),
      hx(state, "RNN algorithm tuning"), cx(state, "RNN algorithm tuning"), hy(state, "RNN algorithm tuning"),
      cy(state, "RNN algorithm tuning"), w(w_bytes, "RNN algorithm tuning"), ws(ws_bytes, "RNN algorithm tuning");
  cudaStream_t stream = ctx.stream();
  for (DeviceBuffer* b : {&x, &hx, &cx})  // not zeros: 0x3C3C is about 1 in fp16
    FUSEC_CUDA_CHECK(cudaMemsetAsync(b->get(), 0x3C, b->size(), stream));
  FUSEC_CUDA_CHECK(cudaMemsetAsync(w.get(), 0, w.size(), stream));
  const bool lstm = p.mode == CUDNN_LSTM;
  cudnnHandle_t h = ctx.cudnn();
  auto run = [&](size_t i) {
    const RnnAlgo& c = *cands[i];
    char* reserve = static_cast<char*>(ws.get()) + (c.workspace_bytes + 255) / 256 * 256;
    const cudnnStatus_t st =
        cudnnRNNForward(h, c.desc, CUDNN_FWD_MODE_INFERENCE, p.dev_lens, p.x, x.get(), p.y, y.get(), p.h, hx.get(),
                        hy.get(), p.h, lstm ? cx.get() : nullptr, lstm ? cy.get() : nullptr, c.weight_bytes, w.get(),
                        c.workspace_bytes, ws.get(), c.reserve_bytes, c.reserve_bytes ? reserve : nullptr);
    return st == CUDNN_STATUS_SUCCESS && cudaGetLastError() == cudaSuccess;
  };
  std::vector<float> ms(cands.size(), -1.0f);
  for (size_t i = 0; i < cands.size(); ++i)  // a candidate that fails its warm-up is left out
    if (run(i) && run(i) && cudaStreamSynchronize(stream) == cudaSuccess) ms[i] = 0.0f;
  cudaGetLastError();
  // The standard algorithm launches kernels per time step by design, and the model's graph holds
  // them all too: its capture is not bounded.
  TimingPlan plan;
  plan.max_nodes_per_call = 0;
  time_candidates(
      stream, ms, plan, [](size_t) {}, run);
  size_t won = cands.size();
  for (size_t i = 0; i < cands.size(); ++i)
    if (ms[i] >= 0 && (won == cands.size() || ms[i] < ms[won])) won = i;
  return won;
}

}  // namespace

RnnAlgo::~RnnAlgo() {
  if (desc) cudnnDestroyRNNDescriptor(desc);
}

const char* rnn_algo_name(cudnnRNNAlgo_t algo) {
  switch (algo) {
    case CUDNN_RNN_ALGO_PERSIST_STATIC:
      return "persistent static";
    case CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H:
      return "persistent static small-h";
    case CUDNN_RNN_ALGO_PERSIST_DYNAMIC:
      return "persistent dynamic";
    default:
      return "standard";
  }
}

std::unique_ptr<RnnAlgo> pick_rnn_algo(const RnnProblem& p, Context& ctx, std::string* why) {
  cudnnHandle_t h = ctx.cudnn();
  auto standard = std::make_unique<RnnAlgo>();
  if (!set_up(p, h, CUDNN_RNN_ALGO_STANDARD, standard.get(), why)) return nullptr;
  const cudnnRNNAlgo_t* forced = forced_algo();
  if (forced && *forced == CUDNN_RNN_ALGO_STANDARD) return standard;
  TuningCache& cache = TuningCache::global();
  if (!forced && !cache.enabled()) return standard;

  // The persistent algorithms cuDNN accepts for this shape, set up lazily: a cached pick sets up
  // only its own (the dynamic one compiles a kernel).
  std::string refused;
  auto candidate = [&](cudnnRNNAlgo_t algo) -> std::unique_ptr<RnnAlgo> {
    auto d = std::make_unique<RnnAlgo>();
    try {
      if (set_up(p, h, algo, d.get(), &refused)) return d;
    } catch (const std::exception&) {
    }
    cudaGetLastError();
    return nullptr;
  };
  if (forced) {  // tests and A/B runs: untimed; the standard algorithm where cuDNN refuses it
    auto d = candidate(*forced);
    return d ? std::move(d) : std::move(standard);
  }
  const std::string key = problem_key(p, ctx.device());
  if (const auto v = cache.get(key)) {
    for (cudnnRNNAlgo_t algo : kAlgos)
      if (*v == rnn_algo_name(algo)) {
        if (algo == CUDNN_RNN_ALGO_STANDARD) return standard;
        if (auto d = candidate(algo)) return d;
      }
  }
  std::vector<std::unique_ptr<RnnAlgo>> cands;
  cands.push_back(std::move(standard));
  // Not the dynamic algorithm: cuDNN compiles it with NVRTC for each shape (0.9 s of the tagger's
  // engine build on the H200), and there it ran 5.5 ms against the static small-h one's 0.69.
  for (cudnnRNNAlgo_t algo : {CUDNN_RNN_ALGO_PERSIST_STATIC, CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H})
    if (auto d = candidate(algo)) cands.push_back(std::move(d));
  size_t won = 0;
  if (cands.size() > 1) {
    try {
      won = race(p, ctx, cands);
    } catch (const std::exception&) {
      cudaGetLastError();  // no memory for the scratch buffers: untimed, the standard algorithm
      return std::move(cands[0]);
    }
    if (won == cands.size()) won = 0;
  }
  cache.put(key, rnn_algo_name(cands[won]->algo));
  return std::move(cands[won]);
}

}  // namespace fusec::cuda
