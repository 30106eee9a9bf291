# One helper call per library, test and benchmark.
#
#   agg_library(NAME agg_config SRCS loader.cc DEPS agg_common yaml-cpp)
#   agg_test(NAME config_test SRCS config_test.cc DEPS agg_config LABELS unit)
#   agg_bench(NAME mac_table_bench SRCS mac_table_bench.cc DEPS agg_dataplane)
#   agg_bench(NAME agg_path_bench SRCS aggregation_stage_bench.cc DEPS agg_dataplane OWN_MAIN)
#
# Test labels: "unit" needs nothing; "eal" starts DPDK in-process on virtual
# devices; "system" builds network namespaces and needs root.

function(agg_library)
  cmake_parse_arguments(A "" "NAME" "SRCS;DEPS" ${ARGN})
  add_library(${A_NAME} STATIC ${A_SRCS})
  target_include_directories(${A_NAME} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_link_libraries(${A_NAME} PUBLIC ${A_DEPS})
endfunction()

function(agg_test)
  cmake_parse_arguments(A "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT AGG_BUILD_TESTS)
    return()
  endif()
  add_executable(${A_NAME} ${A_SRCS})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS} GTest::gtest GTest::gtest_main)
  add_test(NAME ${A_NAME} COMMAND ${A_NAME})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 120)
  endif()
  set_tests_properties(${A_NAME} PROPERTIES LABELS "${A_LABELS}" TIMEOUT ${A_TIMEOUT})
  if("eal" IN_LIST A_LABELS OR "system" IN_LIST A_LABELS)
    # DPDK tests share /var/run/dpdk and the two cores; never run them concurrently.
    set_tests_properties(${A_NAME} PROPERTIES RESOURCE_LOCK dpdk)
  endif()
endfunction()

# OWN_MAIN: the benchmark prints its own lines instead of Google Benchmark's.
function(agg_bench)
  cmake_parse_arguments(A "OWN_MAIN" "NAME" "SRCS;DEPS" ${ARGN})
  if(NOT AGG_BUILD_BENCH)
    return()
  endif()
  add_executable(${A_NAME} ${A_SRCS})
  if(A_OWN_MAIN)
    target_link_libraries(${A_NAME} PRIVATE ${A_DEPS})
  else()
    target_link_libraries(${A_NAME} PRIVATE ${A_DEPS} benchmark::benchmark benchmark::benchmark_main)
  endif()
endfunction()

# A libFuzzer harness (tests/fuzz, configure with -DAGG_FUZZ=ON and clang): the
# executable, linked with libFuzzer's main, and a ctest test labelled "fuzz"
# that runs it for AGG_FUZZ_SECONDS over a temporary copy of its seed corpus
# (tests/fuzz/run_fuzz.sh) and fails on any finding; crash inputs are kept in
# findings/<name>/ beside the binary. The umbrella target "fuzz" builds them all.
#
#   agg_fuzz(NAME wire_fuzz SRCS wire_fuzz.cc DEPS agg_wire)
function(agg_fuzz)
  cmake_parse_arguments(A "" "NAME" "SRCS;DEPS" ${ARGN})
  if(NOT AGG_FUZZ)
    return()
  endif()
  add_executable(${A_NAME} ${A_SRCS})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS})
  target_link_options(${A_NAME} PRIVATE -fsanitize=fuzzer)
  add_dependencies(fuzz ${A_NAME})
  add_test(NAME ${A_NAME}
           COMMAND bash ${PROJECT_SOURCE_DIR}/tests/fuzz/run_fuzz.sh $<TARGET_FILE:${A_NAME}>
                   --seconds ${AGG_FUZZ_SECONDS})
  # libFuzzer stops at -max_total_time only between inputs: leave it room.
  math(EXPR timeout "${AGG_FUZZ_SECONDS} * 2 + 60")
  set_tests_properties(${A_NAME} PROPERTIES LABELS fuzz TIMEOUT ${timeout})
endfunction()

# A man page for an installed program, generated from its --help by help2man
# at build time and installed under share/man. Built when help2man is found
# (scripts/install-deps.sh installs it) and the build is not sanitized (the
# page is the program's own output, run here).
#
#   agg_man_page(TARGET aggctl SECTION 8 NAME "control a running aggswitch through its API")
function(agg_man_page)
  cmake_parse_arguments(A "" "TARGET;SECTION;NAME" "" ${ARGN})
  find_program(AGG_HELP2MAN help2man)
  if(NOT AGG_HELP2MAN OR AGG_SANITIZE OR AGG_FUZZ)
    return()
  endif()
  include(GNUInstallDirs)
  set(page ${PROJECT_BINARY_DIR}/man/${A_TARGET}.${A_SECTION})
  add_custom_command(OUTPUT ${page}
    COMMAND ${AGG_HELP2MAN} --no-info --no-discard-stderr --section=${A_SECTION} --name=${A_NAME}
            --version-string=${PROJECT_VERSION} --output=${page} $<TARGET_FILE:${A_TARGET}>
    DEPENDS ${A_TARGET}
    COMMENT "Man page ${A_TARGET}(${A_SECTION}) from its --help"
    VERBATIM)
  add_custom_target(${A_TARGET}_man ALL DEPENDS ${page})
  install(FILES ${page} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${A_SECTION})
endfunction()
