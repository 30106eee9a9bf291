# Writes a C++ source that holds a file's bytes, for a build step:
#
#   cmake -DINPUT=prog.bpf.o -DOUTPUT=prog_bpf.cc -DSYMBOL=AnswerRedirectBpfObject
#         -DHEADER=client/internal/answer_redirect_bpf.h -P EmbedFile.cmake
#
# The source defines `std::span<const uint8_t> SYMBOL()` in namespace
# aggswitch::client::internal, as HEADER declares it. Used by the CMake and
# the meson builds alike.
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hex_len)
math(EXPR size "${hex_len} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){16})" "\\1\n    " bytes "${bytes}")
file(WRITE "${OUTPUT}.tmp"
     "// Generated from ${INPUT} by cmake/EmbedFile.cmake; do not edit.\n"
     "#include \"${HEADER}\"\n\n"
     "namespace aggswitch::client::internal {\n\n"
     "namespace {\n"
     "alignas(8) constexpr uint8_t kBytes[${size}] = {\n    ${bytes}\n};\n"
     "}  // namespace\n\n"
     "std::span<const uint8_t> ${SYMBOL}() { return {kBytes, sizeof(kBytes)}; }\n\n"
     "}  // namespace aggswitch::client::internal\n")
# Unchanged output keeps its time stamp: nothing rebuilds for nothing.
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
