#include "ir/switches.h"

#include <cstdlib>

namespace fusec {

const char* env_switch(SwitchName name) { return std::getenv(name.c_str()); }

}  // namespace fusec
