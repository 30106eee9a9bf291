// The compiled answer_redirect.bpf.c, an ELF BPF object embedded in the
// client library at build time (cmake/EmbedFile.cmake), so that the library
// needs no file beside it to load its XDP program.
//
// Thread safety: [any].
#pragma once

#include <cstdint>
#include <span>

namespace aggswitch::client::internal {

std::span<const uint8_t> AnswerRedirectBpfObject();

}  // namespace aggswitch::client::internal
