// What a report records about the machine, so that two reports from different machines are not
// compared as if they were one (a CPU's thread count alone does not tell two CPUs apart).
#pragma once
#include <string>

namespace fusec {

/// The CPU's model name ("AMD EPYC 9554 64-Core Processor"), from /proc/cpuinfo; "" if unknown.
std::string host_cpu_model();

}  // namespace fusec
