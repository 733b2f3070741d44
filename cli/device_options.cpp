#include "cli/device_options.h"

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/parallel.h"
#include "cli/common.h"
#include "ir/error.h"
#include "ir/memory_limit.h"
#include "backend/gpu_plugin.h"

namespace fusec::cli {

void DeviceOptions::add_to(CLI::App& app, bool with_graph, bool with_strict) {
  app.add_option("--device", device, "cpu, cuda or auto (default: cuda when a usable GPU is present)");
  add_number(app, "--gpu", gpu, rules::kGpu, "GPU index for --device cuda (default 0)");
  app.add_option("--precision", precision, "fp32 (default), tf32, fp16 or bf16 (GPU); the CPU runs fp32");
  if (with_graph) app.add_option("--cuda-graph", cuda_graph, "on (default): replay the run as one CUDA graph; off");
  if (with_strict) app.add_flag("--strict", strict, "Fail if a node would run on the CPU instead of the GPU");
  app.add_option("--max-device-memory", max_device_memory,
                 "Most GPU memory one model may use, e.g. 8G (default: the GPU's free memory)");
}

ResolvedDevice resolve_device(const DeviceOptions& o) {
  if (o.device != "auto" && o.device != "cpu" && o.device != "cuda")
    bad_input("--device must be cpu, cuda or auto, not '" + o.device + "'");
  if (o.cuda_graph != "on" && o.cuda_graph != "off")
    bad_input("--cuda-graph must be on or off, not '" + o.cuda_graph + "'");
  if (o.gpu < 0) bad_input("--gpu must not be negative");
  if (!o.max_device_memory.empty()) parse_byte_size(o.max_device_memory, "--max-device-memory");
  ResolvedDevice d;
  d.precision = parse_precision(o.precision);
  bool want_cuda = o.device == "cuda";
  // The CUDA backend is loaded only here, when a command may run on the GPU: --device cpu never
  // loads it.
  std::string why;
  GpuPlugin* plugin = o.device == "cpu" ? nullptr : gpu_plugin(&why);
  bool have = plugin && plugin->gpu_available(&why);
  if (o.device == "auto") {
    want_cuda = have;
    d.why = have ? "auto: a GPU was found" : "auto: no usable GPU (" + why + ")";
  } else if (want_cuda && !plugin) {
    bad_input("--device cuda: " + why);
  } else if (want_cuda && !have) {
    bad_input("--device cuda: no usable GPU (" + why + ")");
  }
  if (want_cuda) {
    auto devices = plugin->devices();
    if (o.gpu >= static_cast<int>(devices.size()))
      bad_input("--gpu " + std::to_string(o.gpu) + ": this machine has " + std::to_string(devices.size()) +
                " GPU(s), numbered from 0");
    const auto& info = devices[o.gpu];
    d.cuda = true;
    d.description = "cuda:" + std::to_string(o.gpu) + " " + info.name + " (sm_" + std::to_string(info.sm_major) +
                    std::to_string(info.sm_minor) + ")";
    return d;
  }
  if (d.precision != Precision::FP32)
    bad_input(std::string("--precision ") + precision_name(d.precision) +
              " needs --device cuda; the CPU backend runs fp32");
  d.description = "cpu (" + std::to_string(cpu::num_threads()) + " threads)";
  return d;
}

std::string placement_summary(const Executable& exe) {
  if (const auto* ce = dynamic_cast<const GpuExecutable*>(&exe)) {
    int gpu = 0, folded = 0, float32 = 0, tail = 0;
    std::string cpu, tail_why;
    int cpu_count = 0;
    for (const auto& p : ce->placement()) {
      float32 += p.float32;
      if (p.on_gpu) {
        ++gpu;
      } else if (p.folded) {
        ++folded;
      } else if (p.kernel == kHostTailKernel) {
        if (tail++ == 0) tail_why = p.reason;
      } else {
        ++cpu_count;
        if (cpu_count <= 8) cpu += (cpu.empty() ? "" : ", ") + p.node + " (" + p.op_type + ": " + p.reason + ")";
      }
    }
    std::string s = std::to_string(gpu) + " node(s) on the GPU";
    if (folded) s += ", " + std::to_string(folded) + " folded at plan time";
    if (cpu_count) s += ", " + std::to_string(cpu_count) + " on the CPU: " + cpu + (cpu_count > 8 ? ", ..." : "");
    if (tail)
      s += ", " + std::to_string(tail) + " on the CPU after the GPU part, from where " + tail_why + " (the host tail)";
    if (float32) s += "; " + std::to_string(float32) + " kept in float32 (values read for their absolute size)";
    return s;
  }
  return "";
}

std::vector<DeviceDecision> device_decisions(const Executable& exe) {
  std::vector<DeviceDecision> out;
  if (const auto* ce = dynamic_cast<const GpuExecutable*>(&exe))
    for (const auto& p : ce->placement())
      if (!p.device_decision.empty()) out.push_back({p.node, p.op_type, p.device_decision});
  return out;
}

std::unique_ptr<Backend> make_backend(const DeviceOptions& o, const ResolvedDevice& d) {
  if (d.cuda) {
    GpuOptions co;
    co.device = o.gpu;
    co.precision = d.precision;
    co.cuda_graph = o.cuda_graph == "on";
    co.strict = o.strict;
    if (!o.max_device_memory.empty())
      co.max_device_memory = parse_byte_size(o.max_device_memory, "--max-device-memory");
    std::string why;
    GpuPlugin* plugin = gpu_plugin(&why);
    if (!plugin) bad_input("--device cuda: " + why);
    return plugin->make_backend(co);
  }
  return std::make_unique<cpu::CpuBackend>();
}

}  // namespace fusec::cli
