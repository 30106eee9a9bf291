# One helper call per library, test and benchmark.
#
#   agg_library(NAME agg_config SRCS loader.cc DEPS agg_common yaml-cpp)
#   agg_test(NAME config_test SRCS config_test.cc DEPS agg_config LABELS unit)
#   agg_bench(NAME mac_table_bench SRCS mac_table_bench.cc DEPS agg_dataplane)
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

function(agg_bench)
  cmake_parse_arguments(A "" "NAME" "SRCS;DEPS" ${ARGN})
  if(NOT AGG_BUILD_BENCH)
    return()
  endif()
  add_executable(${A_NAME} ${A_SRCS})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS} benchmark::benchmark benchmark::benchmark_main)
endfunction()
