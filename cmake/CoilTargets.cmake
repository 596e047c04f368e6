# Helpers every CMakeLists.txt of coil uses, so that warnings, numerics flags and test
# registration are set in one place.
#
#   coil_library(NAME SOURCES ... [DEPS ...])        a static library of coil's own code
#   coil_executable(NAME SOURCES ... [DEPS ...])     a program
#   coil_test(NAME SOURCES ... [DEPS ...] [LABELS ...])  a GoogleTest program registered with ctest
#   coil_benchmark(NAME SOURCES ... [DEPS ...])      a Google Benchmark program (not run by ctest)
#   coil_mpi_test(NAME SOURCES ... [DEPS ...] NP 1 2 4 [LABELS ...])  a GoogleTest program run
#                                                    under mpirun once per rank count
#
# With -DCOIL_SANITIZE=ON every executable carries common/sanitizer_defaults.cc (its
# sanitizer options and leak suppressions) and test timeouts are multiplied by
# COIL_TEST_TIME_SCALE, as the tests' own waits are (tests/integration/server_process.h).

# Warnings are errors for coil's own targets only; floating-point contraction is fixed
# (docs/ARCHITECTURE.md §6: the same request gives the same bits alone or in a batch).
function(coil_target_options target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror -Wno-unused-parameter -ffp-contract=off>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall -Werror=all-warnings --fmad=false>)
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR})
  if(COIL_WITH_CUDA)
    target_compile_definitions(${target} PUBLIC COIL_WITH_CUDA=1)
  endif()
endfunction()

if(COIL_SANITIZE)
  set(COIL_TEST_TIME_SCALE 10)
else()
  set(COIL_TEST_TIME_SCALE 1)
endif()

function(coil_executable_options target)
  coil_target_options(${target})
  if(COIL_SANITIZE)
    target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/common/sanitizer_defaults.cc)
  endif()
endfunction()

function(coil_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  coil_target_options(${name})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

function(coil_executable name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  coil_executable_options(${name})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
endfunction()

function(coil_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT COIL_BUILD_TESTS)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  coil_executable_options(${name})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest_main GTest::gmock)
  add_test(NAME ${name} COMMAND ${name})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  math(EXPR ARG_TIMEOUT "${ARG_TIMEOUT} * ${COIL_TEST_TIME_SCALE}")
  set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "${ARG_LABELS}")
endfunction()

function(coil_benchmark name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  if(NOT COIL_BUILD_BENCHMARKS)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  coil_executable_options(${name})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} benchmark::benchmark)
endfunction()

# A GoogleTest program that ctest runs under mpirun, once per rank count in NP, as tests
# NAME_np1, NAME_np2, ... (Open MPI flags: --oversubscribe lets 4 ranks share 2 cores,
# --allow-run-as-root lets CI containers run it). The program brings its own main, which
# must initialize MPI and fail on every rank when any rank fails (DEPS coil_mpi_gtest_main).
function(coil_mpi_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS;NP" ${ARGN})
  if(NOT COIL_BUILD_TESTS)
    return()
  endif()
  if(NOT MPIEXEC_EXECUTABLE)
    message(FATAL_ERROR "coil_mpi_test(${name}): mpirun was not found (find_package(MPI))")
  endif()
  add_executable(${name} ${ARG_SOURCES})
  coil_executable_options(${name})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock)
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  math(EXPR ARG_TIMEOUT "${ARG_TIMEOUT} * ${COIL_TEST_TIME_SCALE}")
  foreach(np IN LISTS ARG_NP)
    add_test(NAME ${name}_np${np}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe
              --allow-run-as-root ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${name}> ${MPIEXEC_POSTFLAGS})
    set_tests_properties(${name}_np${np} PROPERTIES
      TIMEOUT ${ARG_TIMEOUT} LABELS "mpi;${ARG_LABELS}")
  endforeach()
endfunction()
