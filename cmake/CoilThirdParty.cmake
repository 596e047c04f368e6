# Abseil and nlohmann_json: the system packages where they are installed (Debian's -dev
# packages, scripts/setup.sh), else the copies scripts/device_bundle.sh puts in the ignored
# folder third_party_local/ (a GPU machine with a compiler and CUDA but none of them):
#   third_party_local/absl/include/absl/...      Abseil's headers
#   third_party_local/absl/lib/libabsl_*.a       its static libraries, all of them
#   third_party_local/nlohmann/include/nlohmann/ nlohmann_json's headers
# The carried Abseil is one INTERFACE library linking every archive as one group (the
# linker rescans them, so the order of the archives does not matter), behind an alias for
# each absl:: target coil uses; the carried headers are SYSTEM, as the packaged ones are.
set(COIL_THIRD_PARTY_LOCAL "${PROJECT_SOURCE_DIR}/third_party_local")

# Every absl:: target named in coil's CMake files (grep -rhoE 'absl::[a-z_0-9]+').
set(COIL_ABSL_TARGETS
  flags flags_parse flags_usage flat_hash_map inlined_vector span status statusor str_format
  strings synchronization)

find_package(absl CONFIG QUIET)
if(absl_FOUND)
  message(STATUS "coil: Abseil ${absl_VERSION} found (${absl_DIR})")
elseif(EXISTS "${COIL_THIRD_PARTY_LOCAL}/absl/include/absl/base/config.h")
  file(GLOB COIL_ABSL_ARCHIVES "${COIL_THIRD_PARTY_LOCAL}/absl/lib/libabsl_*.a")
  if(NOT COIL_ABSL_ARCHIVES)
    message(FATAL_ERROR "coil: ${COIL_THIRD_PARTY_LOCAL}/absl has headers but no lib/libabsl_*.a; rerun scripts/device_bundle.sh")
  endif()
  list(LENGTH COIL_ABSL_ARCHIVES COIL_ABSL_ARCHIVE_COUNT)
  string(JOIN "," COIL_ABSL_GROUP ${COIL_ABSL_ARCHIVES})
  add_library(coil_absl_carried INTERFACE)
  target_include_directories(coil_absl_carried SYSTEM INTERFACE "${COIL_THIRD_PARTY_LOCAL}/absl/include")
  target_link_libraries(coil_absl_carried INTERFACE "$<LINK_GROUP:RESCAN,${COIL_ABSL_GROUP}>" Threads::Threads)
  # Abseil 20220623 predates GCC 13, whose standard headers stopped including <cstdint> on
  # the way; the GPU machine's compiler may be that new, so every file gets it first.
  target_compile_options(coil_absl_carried INTERFACE
    "$<$<COMPILE_LANGUAGE:CXX>:SHELL:-include cstdint>"
    "$<$<COMPILE_LANGUAGE:CUDA>:SHELL:--pre-include cstdint>")
  foreach(name IN LISTS COIL_ABSL_TARGETS)
    add_library(absl::${name} ALIAS coil_absl_carried)
  endforeach()
  message(STATUS "coil: Abseil from ${COIL_THIRD_PARTY_LOCAL}/absl (${COIL_ABSL_ARCHIVE_COUNT} static archives)")
else()
  message(FATAL_ERROR "coil: Abseil not found; install libabsl-dev (scripts/setup.sh) or carry it in third_party_local/ (scripts/device_bundle.sh)")
endif()

find_package(nlohmann_json CONFIG QUIET)
if(nlohmann_json_FOUND)
  message(STATUS "coil: nlohmann_json ${nlohmann_json_VERSION} found")
elseif(EXISTS "${COIL_THIRD_PARTY_LOCAL}/nlohmann/include/nlohmann/json.hpp")
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  set_target_properties(nlohmann_json::nlohmann_json PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${COIL_THIRD_PARTY_LOCAL}/nlohmann/include")
  message(STATUS "coil: nlohmann_json from ${COIL_THIRD_PARTY_LOCAL}/nlohmann")
else()
  message(FATAL_ERROR "coil: nlohmann_json not found; install nlohmann-json3-dev (scripts/setup.sh) or carry it in third_party_local/ (scripts/device_bundle.sh)")
endif()
