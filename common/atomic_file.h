// Replacing a file so that a crash at any moment leaves either the old
// content or the new, never a mix or nothing: the new content goes into a
// temporary file beside it, which is flushed to disk and then renamed over
// the old (POSIX rename is atomic), and the directory entry is flushed too.
//
//   RETURN_IF_ERROR(common::WriteFileAtomically("/var/lib/aggswitch/jobs.json", text, 0600));
//
// Thread safety: any thread; two writers of one path at once race for the
// temporary file (callers serialise their own writes).
#pragma once

#include <sys/types.h>

#include <string>

#include "common/status.h"

namespace aggswitch::common {

// Writes `content` to `path` atomically, the file created with `mode`
// (before the umask). Unavailable, naming the path and the failed step, when
// it cannot; `path` is then as it was.
[[nodiscard]] Status WriteFileAtomically(const std::string& path, const std::string& content,
                                         mode_t mode = 0644);

}  // namespace aggswitch::common
