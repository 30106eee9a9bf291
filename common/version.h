// The build's version string, set by the build system (project version).
//
// Thread safety: any thread.
#pragma once

namespace aggswitch::common {

// "0.1.0"
const char* Version();

}  // namespace aggswitch::common
