#include "common/version.h"

#ifndef AGG_VERSION
#error "the build system defines AGG_VERSION"
#endif

namespace aggswitch::common {

const char* Version() { return AGG_VERSION; }

}  // namespace aggswitch::common
